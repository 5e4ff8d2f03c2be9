/* SPDX-License-Identifier: MIT */
/*
 * Hugging Face config.json of the decoder-only models we run, the weight
 * names and shapes it implies, and the check of a model directory against
 * them. Anything that would change the math and that we do not implement
 * is refused by name rather than ignored.
 */
#include "model_internal.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CFG "config.json"

static const char *const linear_names[] = {
#define PGRT_X_(name, hf, block) hf,
    PGRT_LINEAR_MAP(PGRT_X_)
#undef PGRT_X_
};
static const char *const linear_blocks[] = {
#define PGRT_X_(name, hf, block) block,
    PGRT_LINEAR_MAP(PGRT_X_)
#undef PGRT_X_
};

const char *pgrt_linear_name(pgrt_linear m)
{
    return (unsigned)m < PGRT_LINEAR_COUNT ? linear_names[m] : "?";
}

const char *model_linear_block(pgrt_linear m)
{
    return (unsigned)m < PGRT_LINEAR_COUNT ? linear_blocks[m] : "?";
}

void pgrt_linear_dims(const pgrt_hf_config *c, pgrt_linear m, int *in, int *out)
{
    int q = c->heads * c->head_dim, kv = c->kv_heads * c->head_dim;
    int i = c->hidden, o = c->hidden;
    switch (m) {
    case PGRT_LINEAR_Q: o = q; break;
    case PGRT_LINEAR_K:
    case PGRT_LINEAR_V: o = kv; break;
    case PGRT_LINEAR_O: i = q; break;
    case PGRT_LINEAR_GATE:
    case PGRT_LINEAR_UP: o = c->intermediate; break;
    case PGRT_LINEAR_DOWN: i = c->intermediate; break;
    default: break;
    }
    *in = i;
    *out = o;
}

/* rope_scaling / rope_parameters: absent, null, or the default rope. */
static int check_rope(const pgrt_jval *root, const char *field, double *theta)
{
    const pgrt_jval *v = pgrt_jval_member(root, field);
    if (!v || pgrt_jval_is_null(v))
        return 0;
    if (pgrt_jval_type(v) != PGRT_JSON_OBJECT)
        return model_fail(PGRT_EINVAL, CFG ": %s: unsupported (only the default rope)", field);
    const char *type = NULL;
    for (size_t i = 0; i < pgrt_jval_count(v); i++) {
        const char *k = pgrt_jval_key_at(v, i);
        const pgrt_jval *x = pgrt_jval_value_at(v, i);
        if (!strcmp(k, "rope_type") || !strcmp(k, "type"))
            type = pgrt_jval_string(x, NULL);
        else if (!strcmp(k, "rope_theta")) {
            if (pgrt_jval_double(x, theta) != 0)
                return model_fail(PGRT_EINVAL, CFG ": %s.rope_theta: expected a number", field);
        } else
            return model_fail(PGRT_EINVAL, CFG ": %s: unsupported setting '%s'", field, k);
    }
    if (!type || strcmp(type, "default"))
        return model_fail(PGRT_EINVAL, CFG ": %s: unsupported rope type '%s' (only the default)",
                          field, type ? type : "(none)");
    return 0;
}

static int config_from_json(const pgrt_jval *root, pgrt_hf_config *c)
{
    memset(c, 0, sizeof *c);
    if (pgrt_jval_type(root) != PGRT_JSON_OBJECT)
        return model_fail(PGRT_EINVAL, CFG ": not a JSON object");
    const char *mt;
    int rc = model_string_opt(root, CFG, "model_type", &mt);
    if (rc < 0)
        return rc;
    if (!mt)
        return model_fail(PGRT_EINVAL, CFG ": model_type: missing");
    if (!strcmp(mt, "qwen2"))
        c->arch = PGRT_ARCH_QWEN2;
    else if (!strcmp(mt, "llama"))
        c->arch = PGRT_ARCH_LLAMA;
    else
        return model_fail(PGRT_EINVAL, CFG ": model_type: '%.64s' is not supported (qwen2, llama)",
                          mt);
    const int64_t big = 1 << 24;
    int64_t hidden, inter, layers, heads, vocab, kv, hd;
    if ((rc = model_int_req(root, CFG, "hidden_size", 1, big, &hidden)) ||
        (rc = model_int_req(root, CFG, "intermediate_size", 1, big, &inter)) ||
        (rc = model_int_req(root, CFG, "num_hidden_layers", 1, 4096, &layers)) ||
        (rc = model_int_req(root, CFG, "num_attention_heads", 1, 4096, &heads)) ||
        (rc = model_int_req(root, CFG, "vocab_size", 1, big, &vocab)))
        return rc;
    kv = heads;
    if ((rc = model_int_opt(root, CFG, "num_key_value_heads", 1, 4096, &kv)) < 0)
        return rc;
    if (heads % kv)
        return model_fail(PGRT_EINVAL,
                          CFG ": num_key_value_heads: %lld does not divide "
                              "num_attention_heads %lld",
                          (long long)kv, (long long)heads);
    if ((rc = model_int_opt(root, CFG, "head_dim", 1, 4096, &hd)) < 0)
        return rc;
    if (rc == 1) {
        if (hidden % heads)
            return model_fail(PGRT_EINVAL,
                              CFG ": num_attention_heads: %lld does not divide hidden_size %lld "
                                  "(and no head_dim)",
                              (long long)heads, (long long)hidden);
        hd = hidden / heads;
    }
    if (hd % 2)
        return model_fail(PGRT_EINVAL, CFG ": head_dim: %lld is odd (rope needs pairs)",
                          (long long)hd);
    if (heads * hd > big)
        return model_fail(PGRT_ERANGE, CFG ": num_attention_heads x head_dim too large");
    c->hidden = (int)hidden;
    c->intermediate = (int)inter;
    c->layers = (int)layers;
    c->heads = (int)heads;
    c->kv_heads = (int)kv;
    c->head_dim = (int)hd;
    c->vocab = (int)vocab;

    if ((rc = model_double_opt(root, CFG, "rms_norm_eps", &c->rms_norm_eps)) < 0)
        return rc;
    if (rc == 1)
        return model_fail(PGRT_EINVAL, CFG ": rms_norm_eps: missing");
    if (!(c->rms_norm_eps > 0 && c->rms_norm_eps < 1))
        return model_fail(PGRT_ERANGE, CFG ": rms_norm_eps: %g not in (0, 1)", c->rms_norm_eps);
    c->rope_theta = 10000.0;
    if ((rc = model_double_opt(root, CFG, "rope_theta", &c->rope_theta)) < 0)
        return rc;
    if ((rc = check_rope(root, "rope_scaling", &c->rope_theta)) ||
        (rc = check_rope(root, "rope_parameters", &c->rope_theta)))
        return rc;
    if (!(c->rope_theta > 1 && isfinite(c->rope_theta)))
        return model_fail(PGRT_ERANGE, CFG ": rope_theta: %g must be > 1", c->rope_theta);
    if ((rc = model_bool_opt(root, CFG, "tie_word_embeddings", &c->tie_embeddings)) < 0)
        return rc;

    const char *act;
    if ((rc = model_string_opt(root, CFG, "hidden_act", &act)) < 0)
        return rc;
    if (act && strcmp(act, "silu"))
        return model_fail(PGRT_EINVAL, CFG ": hidden_act: '%.32s' is not supported (silu)", act);
    bool b = false;
    if ((rc = model_bool_opt(root, CFG, "use_sliding_window", &b)) < 0)
        return rc;
    if (b)
        return model_fail(PGRT_EINVAL, CFG ": use_sliding_window: true is not supported");
    const pgrt_jval *lt = pgrt_jval_member(root, "layer_types");
    if (lt && !pgrt_jval_is_null(lt)) {
        if (pgrt_jval_type(lt) != PGRT_JSON_ARRAY)
            return model_fail(PGRT_EINVAL, CFG ": layer_types: expected an array");
        for (size_t i = 0; i < pgrt_jval_count(lt); i++) {
            const char *s = pgrt_jval_string(pgrt_jval_item(lt, i), NULL);
            if (!s || strcmp(s, "full_attention"))
                return model_fail(PGRT_EINVAL,
                                  CFG ": layer_types[%zu]: only full_attention is supported", i);
        }
    }
    if (c->arch == PGRT_ARCH_QWEN2) {
        /* Qwen2's attention has q, k and v biases and no o bias, whatever
         * the config says */
        c->qkv_bias = true;
        c->o_bias = false;
    } else {
        b = false;
        if ((rc = model_bool_opt(root, CFG, "attention_bias", &b)) < 0)
            return rc;
        c->qkv_bias = c->o_bias = b;
        b = false;
        if ((rc = model_bool_opt(root, CFG, "mlp_bias", &b)) < 0)
            return rc;
        if (b)
            return model_fail(PGRT_EINVAL, CFG ": mlp_bias: true is not supported");
        double pt = 1;
        if ((rc = model_double_opt(root, CFG, "pretraining_tp", &pt)) < 0)
            return rc;
        if (pt != 1)
            return model_fail(PGRT_EINVAL, CFG ": pretraining_tp: %g is not supported (1)", pt);
    }
    return 0;
}

int pgrt_hf_config_parse(const char *json, size_t len, pgrt_hf_config *out)
{
    if (!out)
        return model_fail(PGRT_EINVAL, "pgrt_hf_config_parse: NULL argument");
    pgrt_json_limits lim = {.max_size = 1u << 24};
    pgrt_json *doc;
    int rc = pgrt_json_parse(json, len, &lim, CFG, &doc);
    if (rc)
        return rc;
    rc = config_from_json(pgrt_json_root(doc), out);
    pgrt_json_destroy(&doc);
    return rc;
}

int pgrt_hf_config_load(const char *path, pgrt_hf_config *out)
{
    char *text;
    size_t len;
    int rc = model_read_file(path, 1u << 24, &text, &len);
    if (rc)
        return rc;
    rc = pgrt_hf_config_parse(text, len, out);
    free(text);
    return rc;
}

/* ---------------------------------------------------------------- weights */

static void spec(pgrt_weight_spec *s, int layer, int64_t d0, int64_t d1, const char *fmt, ...)
    RT_PRINTF(5, 6);

static void spec(pgrt_weight_spec *s, int layer, int64_t d0, int64_t d1, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(s->name, sizeof s->name, fmt, ap);
    va_end(ap);
    s->layer = layer;
    s->ndim = d1 ? 2 : 1;
    s->shape[0] = d0;
    s->shape[1] = d1;
}

int pgrt_model_weight_specs(const pgrt_hf_config *c, pgrt_weight_spec **specs, size_t *n)
{
    if (!c || !specs || !n || c->layers <= 0)
        return model_fail(PGRT_EINVAL, "pgrt_model_weight_specs: bad argument");
    size_t per = 2 + PGRT_LINEAR_COUNT + (c->qkv_bias ? 3 : 0) + (c->o_bias ? 1 : 0);
    size_t cap = 3 + (size_t)c->layers * per;
    pgrt_weight_spec *s = calloc(cap, sizeof *s);
    if (!s)
        return model_fail(PGRT_ENOMEM, "out of memory");
    size_t k = 0;
    spec(&s[k++], -1, c->vocab, c->hidden, "model.embed_tokens.weight");
    for (int l = 0; l < c->layers; l++) {
        spec(&s[k++], l, c->hidden, 0, "model.layers.%d.input_layernorm.weight", l);
        for (int m = 0; m < PGRT_LINEAR_COUNT; m++) {
            int in, out;
            pgrt_linear_dims(c, (pgrt_linear)m, &in, &out);
            spec(&s[k++], l, out, in, "model.layers.%d.%s.%s.weight", l, linear_blocks[m],
                 linear_names[m]);
            bool bias = (m <= PGRT_LINEAR_V && c->qkv_bias) || (m == PGRT_LINEAR_O && c->o_bias);
            if (bias)
                spec(&s[k++], l, out, 0, "model.layers.%d.%s.%s.bias", l, linear_blocks[m],
                     linear_names[m]);
            if (m == PGRT_LINEAR_O)
                spec(&s[k++], l, c->hidden, 0, "model.layers.%d.post_attention_layernorm.weight",
                     l);
        }
    }
    spec(&s[k++], -1, c->hidden, 0, "model.norm.weight");
    if (!c->tie_embeddings)
        spec(&s[k++], -1, c->vocab, c->hidden, "lm_head.weight");
    *specs = s;
    *n = k;
    return 0;
}

struct pgrt_model_files {
    pgrt_hf_config cfg;
    pgrt_st_set *set;
    char *config_path;
};

static void shape_str(char *buf, size_t len, int ndim, const int64_t *shape)
{
    size_t at = 0;
    at += (size_t)snprintf(buf, len, "[");
    for (int d = 0; d < ndim && at < len; d++)
        at += (size_t)snprintf(buf + at, len - at, "%s%lld", d ? ", " : "", (long long)shape[d]);
    if (at < len)
        snprintf(buf + at, len - at, "]");
}

static bool same_shape(const pgrt_st_tensor *t, const pgrt_weight_spec *s)
{
    if (t->ndim != s->ndim)
        return false;
    for (int d = 0; d < s->ndim; d++)
        if (t->shape[d] != s->shape[d])
            return false;
    return true;
}

static int check_tensor(const pgrt_st_tensor *t, const pgrt_weight_spec *s, const char *dir)
{
    if (!same_shape(t, s)) {
        char got[128], want[64];
        shape_str(got, sizeof got, t->ndim, t->shape);
        shape_str(want, sizeof want, s->ndim, s->shape);
        return model_fail(PGRT_EINVAL, "%s: tensor '%s': shape %s, expected %s", dir, s->name, got,
                          want);
    }
    if (t->dtype != PGRT_ST_BF16 && t->dtype != PGRT_ST_F16 && t->dtype != PGRT_ST_F32)
        return model_fail(PGRT_EINVAL,
                          "%s: tensor '%s': dtype %s is not supported (BF16, F16, F32)", dir,
                          s->name, pgrt_st_dtype_name(t->dtype));
    return 0;
}

static int cmp_spec(const void *a, const void *b)
{
    return strcmp(((const pgrt_weight_spec *)a)->name, ((const pgrt_weight_spec *)b)->name);
}

static bool ends_with(const char *s, const char *suffix)
{
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && !strcmp(s + a - b, suffix);
}

int pgrt_model_open(const char *dir, pgrt_model_files **out)
{
    if (!dir || !out)
        return model_fail(PGRT_EINVAL, "pgrt_model_open: NULL argument");
    *out = NULL;
    pgrt_model_files *m = calloc(1, sizeof *m);
    if (!m)
        return model_fail(PGRT_ENOMEM, "out of memory");
    char path[4096];
    pgrt_weight_spec *specs = NULL;
    size_t ns = 0;
    int rc = model_path_join(path, sizeof path, dir, CFG);
    if (!rc && !(m->config_path = strdup(path)))
        rc = model_fail(PGRT_ENOMEM, "out of memory");
    if (!rc)
        rc = pgrt_hf_config_load(path, &m->cfg);
    if (!rc)
        rc = pgrt_st_set_open(dir, &m->set);
    if (!rc)
        rc = pgrt_model_weight_specs(&m->cfg, &specs, &ns);
    for (size_t i = 0; i < ns && !rc; i++) {
        const pgrt_st_tensor *t = pgrt_st_set_find(m->set, specs[i].name);
        if (!t)
            rc = model_fail(PGRT_EINVAL, "%s: tensor '%s' missing", dir, specs[i].name);
        else
            rc = check_tensor(t, &specs[i], dir);
    }
    if (!rc) {
        qsort(specs, ns, sizeof *specs, cmp_spec);
        for (size_t i = 0; i < pgrt_st_set_count(m->set) && !rc; i++) {
            const pgrt_st_tensor *t = pgrt_st_set_at(m->set, i);
            pgrt_weight_spec key;
            snprintf(key.name, sizeof key.name, "%s", t->name);
            if (strlen(t->name) < sizeof key.name &&
                bsearch(&key, specs, ns, sizeof *specs, cmp_spec))
                continue;
            if (ends_with(t->name, ".rotary_emb.inv_freq"))
                continue;
            if (m->cfg.tie_embeddings && !strcmp(t->name, "lm_head.weight")) {
                pgrt_weight_spec head;
                spec(&head, -1, m->cfg.vocab, m->cfg.hidden, "lm_head.weight");
                if (!(rc = check_tensor(t, &head, dir)))
                    continue;
                break;
            }
            rc = model_fail(PGRT_EINVAL, "%s: tensor '%s' is not used by a %s model with this "
                                         "config",
                            dir, t->name, m->cfg.arch == PGRT_ARCH_QWEN2 ? "qwen2" : "llama");
        }
    }
    free(specs);
    if (rc) {
        pgrt_model_close(&m);
        return rc;
    }
    *out = m;
    return 0;
}

void pgrt_model_close(pgrt_model_files **m)
{
    if (!m || !*m)
        return;
    pgrt_st_set_close(&(*m)->set);
    free((*m)->config_path);
    free(*m);
    *m = NULL;
}

size_t pgrt_model_file_count(const pgrt_model_files *m)
{
    return m ? 1 + model_st_set_path_count(m->set) : 0;
}

const char *pgrt_model_file_path(const pgrt_model_files *m, size_t i)
{
    if (!m || i >= pgrt_model_file_count(m))
        return NULL;
    return i == 0 ? m->config_path : model_st_set_path(m->set, i - 1);
}

const pgrt_hf_config *pgrt_model_hf_config(const pgrt_model_files *m)
{
    return m ? &m->cfg : NULL;
}

const pgrt_st_tensor *pgrt_model_tensor(const pgrt_model_files *m, const char *name)
{
    return m ? pgrt_st_set_find(m->set, name) : NULL;
}
