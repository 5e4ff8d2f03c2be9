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

void pgrt_linear_dims(const pgrt_model_config *c, pgrt_linear m, int *in, int *out)
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

static const char *const arch_names[] = {"qwen2", "llama", "mistral", "qwen3"};

const char *pgrt_arch_name(pgrt_arch a)
{
    return (unsigned)a < sizeof arch_names / sizeof *arch_names ? arch_names[a] : "?";
}

/* One spelling of the rope settings as read: given when the field holds an
 * object (absent and null say nothing). */
typedef struct rope_spec {
    bool given;
    pgrt_rope_scaling s;
} rope_spec;

/* A number of a rope object: field.key, required. */
static int rope_number(const pgrt_jval *obj, const char *field, const char *key, double *out)
{
    const pgrt_jval *v = pgrt_jval_member(obj, key);
    if (!v || pgrt_jval_is_null(v))
        return model_fail(PGRT_EINVAL, CFG ": %s.%s: missing (llama3 needs it)", field, key);
    if (pgrt_jval_double(v, out) != 0)
        return model_fail(PGRT_EINVAL, CFG ": %s.%s: expected a number", field, key);
    return 0;
}

/* llama3's four numbers, each checked where transformers would divide by
 * zero, compare the wrong way round or index nothing. */
static int rope_llama3(const pgrt_jval *v, const char *field, pgrt_rope_scaling *s)
{
    double orig;
    int rc;
    if ((rc = rope_number(v, field, "factor", &s->factor)) ||
        (rc = rope_number(v, field, "low_freq_factor", &s->low_freq_factor)) ||
        (rc = rope_number(v, field, "high_freq_factor", &s->high_freq_factor)) ||
        (rc = rope_number(v, field, "original_max_position_embeddings", &orig)))
        return rc;
    if (!(s->factor > 0))
        return model_fail(PGRT_ERANGE, CFG ": %s.factor: %g must be > 0", field, s->factor);
    if (!(s->low_freq_factor > 0))
        return model_fail(PGRT_ERANGE, CFG ": %s.low_freq_factor: %g must be > 0", field,
                          s->low_freq_factor);
    if (!(s->high_freq_factor > s->low_freq_factor))
        return model_fail(PGRT_ERANGE,
                          CFG ": %s.high_freq_factor: %g must be > low_freq_factor %g", field,
                          s->high_freq_factor, s->low_freq_factor);
    if (!(orig >= 1))
        return model_fail(PGRT_ERANGE,
                          CFG ": %s.original_max_position_embeddings: %g must be >= 1", field,
                          orig);
    if (orig != floor(orig) || orig > INT32_MAX)
        return model_fail(PGRT_EINVAL,
                          CFG ": %s.original_max_position_embeddings: %g is not an integer up "
                              "to 2^31 - 1",
                          field, orig);
    s->original_max_positions = (int64_t)orig;
    return 0;
}

/* rope_scaling / rope_parameters: absent, null, the default rope or
 * llama3's; a rope_theta inside replaces *theta. The type is read first
 * (rope_type, else the older spelling type, as transformers does), so
 * that another rope is refused by its name rather than by a setting of
 * its own. */
static int parse_rope(const pgrt_jval *root, const char *field, double *theta, rope_spec *r)
{
    memset(r, 0, sizeof *r);
    const pgrt_jval *v = pgrt_jval_member(root, field);
    if (!v || pgrt_jval_is_null(v))
        return 0;
    if (pgrt_jval_type(v) != PGRT_JSON_OBJECT)
        return model_fail(PGRT_EINVAL, CFG ": %s: unsupported value (an object or null)", field);
    r->given = true;
    const pgrt_jval *t = pgrt_jval_member(v, "rope_type");
    const char *type = pgrt_jval_string(t ? t : pgrt_jval_member(v, "type"), NULL);
    bool llama3 = type && !strcmp(type, "llama3");
    if (!llama3 && (!type || strcmp(type, "default")))
        return model_fail(PGRT_EINVAL,
                          CFG ": %s: unsupported rope type '%.32s' (supported: default, llama3)",
                          field, type ? type : "(none)");
    for (size_t i = 0; i < pgrt_jval_count(v); i++) {
        const char *k = pgrt_jval_key_at(v, i);
        const pgrt_jval *x = pgrt_jval_value_at(v, i);
        double d;
        if (!strcmp(k, "rope_type") || !strcmp(k, "type"))
            continue;
        if (!strcmp(k, "rope_theta")) {
            if (pgrt_jval_double(x, theta) != 0)
                return model_fail(PGRT_EINVAL, CFG ": %s.rope_theta: expected a number", field);
        } else if (!strcmp(k, "partial_rotary_factor")) {
            if (pgrt_jval_double(x, &d) != 0 || d != 1)
                return model_fail(PGRT_EINVAL,
                                  CFG ": %s.partial_rotary_factor: only 1 is supported", field);
        } else if (!(llama3 && (!strcmp(k, "factor") || !strcmp(k, "low_freq_factor") ||
                                !strcmp(k, "high_freq_factor") ||
                                !strcmp(k, "original_max_position_embeddings"))))
            return model_fail(PGRT_EINVAL, CFG ": %s: unsupported setting '%s' for the %s rope",
                              field, k, llama3 ? "llama3" : "default");
    }
    if (!llama3)
        return 0;
    r->s.kind = PGRT_ROPE_LLAMA3;
    return rope_llama3(v, field, &r->s);
}

static bool same_rope(const pgrt_rope_scaling *a, const pgrt_rope_scaling *b)
{
    return a->kind == b->kind && a->factor == b->factor &&
           a->low_freq_factor == b->low_freq_factor &&
           a->high_freq_factor == b->high_freq_factor &&
           a->original_max_positions == b->original_max_positions;
}

/* Both spellings may be there (a config converted by transformers 5 keeps
 * its rope_scaling): they must say the same. */
static int read_rope(const pgrt_jval *root, pgrt_model_config *c)
{
    rope_spec rs, rp;
    int rc;
    if ((rc = parse_rope(root, "rope_scaling", &c->rope_theta, &rs)) ||
        (rc = parse_rope(root, "rope_parameters", &c->rope_theta, &rp)))
        return rc;
    if (rs.given && rp.given && !same_rope(&rs.s, &rp.s))
        return model_fail(PGRT_EINVAL, CFG ": rope_scaling and rope_parameters disagree");
    c->rope = rp.given ? rp.s : rs.s;
    double prf = 1;
    if ((rc = model_double_opt(root, CFG, "partial_rotary_factor", &prf)) < 0)
        return rc;
    if (prf != 1)
        return model_fail(PGRT_EINVAL, CFG ": partial_rotary_factor: %g is not supported (1)",
                          prf);
    return 0;
}

/* Mistral attends within sliding_window tokens; a window no shorter than
 * max_position_embeddings never bites. */
static int check_mistral_window(const pgrt_jval *root, const pgrt_model_config *c)
{
    const pgrt_jval *v = pgrt_jval_member(root, "sliding_window");
    if (v && pgrt_jval_is_null(v))
        return 0;
    if (!v) {
        /* MistralConfig's default */
        if (4096 >= c->max_positions)
            return 0;
        return model_fail(PGRT_EINVAL,
                          CFG ": sliding_window: absent, which transformers takes as 4096, "
                              "below max_position_embeddings %lld: windowed attention is not "
                              "supported (null turns it off)",
                          (long long)c->max_positions);
    }
    int64_t w;
    int rc = model_int_req(root, CFG, "sliding_window", 1, INT64_MAX, &w);
    if (rc)
        return rc;
    if (w < c->max_positions)
        return model_fail(PGRT_EINVAL,
                          CFG ": sliding_window: %lld is below max_position_embeddings %lld: "
                              "windowed attention is not supported",
                          (long long)w, (long long)c->max_positions);
    return 0;
}

/* model_type: one of the architectures this reads. */
static int read_arch(const pgrt_jval *root, pgrt_model_config *c)
{
    const char *mt;
    int rc = model_string_opt(root, CFG, "model_type", &mt);
    if (rc < 0)
        return rc;
    if (!mt)
        return model_fail(PGRT_EINVAL, CFG ": model_type: missing");
    size_t na = sizeof arch_names / sizeof *arch_names, a = 0;
    while (a < na && strcmp(mt, arch_names[a]))
        a++;
    if (a == na)
        return model_fail(PGRT_EINVAL,
                          CFG ": model_type: '%.64s' is not supported (qwen2, llama, mistral, "
                              "qwen3)",
                          mt);
    c->arch = (pgrt_arch)a;
    return 0;
}

/* The sizes, with transformers' defaults for the optional ones. */
static int read_shape(const pgrt_jval *root, pgrt_model_config *c)
{
    int rc;
    const int64_t big = 1 << 24;
    int64_t hidden, inter, layers, heads, vocab, kv, hd;
    if ((rc = model_int_req(root, CFG, "hidden_size", 1, big, &hidden)) ||
        (rc = model_int_req(root, CFG, "intermediate_size", 1, big, &inter)) ||
        (rc = model_int_req(root, CFG, "num_hidden_layers", 1, 4096, &layers)) ||
        (rc = model_int_req(root, CFG, "num_attention_heads", 1, 4096, &heads)) ||
        (rc = model_int_req(root, CFG, "vocab_size", 1, big, &vocab)))
        return rc;
    /* transformers' defaults: MistralConfig's num_key_value_heads is 8,
     * Qwen3Config's head_dim 128 */
    kv = c->arch == PGRT_ARCH_MISTRAL ? 8 : heads;
    if ((rc = model_int_opt(root, CFG, "num_key_value_heads", 1, 4096, &kv)) < 0)
        return rc;
    if (heads % kv)
        return model_fail(PGRT_EINVAL,
                          CFG ": num_key_value_heads: %lld%s does not divide "
                              "num_attention_heads %lld",
                          (long long)kv, rc == 1 ? " (absent: Mistral's default)" : "",
                          (long long)heads);
    hd = 128;
    if ((rc = model_int_opt(root, CFG, "head_dim", 1, 4096, &hd)) < 0)
        return rc;
    if (rc == 1 && c->arch != PGRT_ARCH_QWEN3) {
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

    return 0;
}

/* The norm's eps, the positions and RoPE, tied embeddings. */
static int read_norm_rope(const pgrt_jval *root, pgrt_model_config *c)
{
    int rc;
    if ((rc = model_double_opt(root, CFG, "rms_norm_eps", &c->rms_norm_eps)) < 0)
        return rc;
    if (rc == 1)
        return model_fail(PGRT_EINVAL, CFG ": rms_norm_eps: missing");
    if (!(c->rms_norm_eps > 0 && c->rms_norm_eps < 1))
        return model_fail(PGRT_ERANGE, CFG ": rms_norm_eps: %g not in (0, 1)", c->rms_norm_eps);
    static const int64_t max_pos[] = {32768, 2048, 4096 * 32, 32768};
    c->max_positions = max_pos[c->arch];
    if ((rc = model_int_opt(root, CFG, "max_position_embeddings", 1, INT64_MAX,
                            &c->max_positions)) < 0)
        return rc;
    c->rope_theta = 10000.0;
    if ((rc = model_double_opt(root, CFG, "rope_theta", &c->rope_theta)) < 0)
        return rc;
    if ((rc = read_rope(root, c)))
        return rc;
    if (!(c->rope_theta > 1 && isfinite(c->rope_theta)))
        return model_fail(PGRT_ERANGE, CFG ": rope_theta: %g must be > 1", c->rope_theta);
    if ((rc = model_bool_opt(root, CFG, "tie_word_embeddings", &c->tie_embeddings)) < 0)
        return rc;

    return 0;
}

/* What a config may ask for that the model does not do: an activation
 * other than SiLU, a sliding window, layers other than full attention. */
static int refuse_unsupported(const pgrt_jval *root)
{
    int rc;
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
    return 0;
}

/* The biases (and Qwen3's q/k norms) each architecture has, and its own
 * refusals. */
static int read_arch_parts(const pgrt_jval *root, pgrt_model_config *c)
{
    int rc;
    bool b = false;
    switch (c->arch) {
    case PGRT_ARCH_QWEN2:
        /* Qwen2's attention has q, k and v biases and no o bias, whatever
         * the config says */
        c->qkv_bias = true;
        c->o_bias = false;
        return 0;
    case PGRT_ARCH_MISTRAL:
        /* no biases anywhere, whatever the config says; the window only
         * where it never bites */
        return check_mistral_window(root, c);
    case PGRT_ARCH_QWEN3:
        /* q_proj, k_proj, v_proj and o_proj all take attention_bias; the
         * MLP has none */
        c->qk_norm = true;
        b = false;
        if ((rc = model_bool_opt(root, CFG, "attention_bias", &b)) < 0)
            return rc;
        c->qkv_bias = c->o_bias = b;
        return 0;
    case PGRT_ARCH_LLAMA:
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
        return 0;
    }
    return 0;
}

static int config_from_json(const pgrt_jval *root, pgrt_model_config *c)
{
    memset(c, 0, sizeof *c);
    if (pgrt_jval_type(root) != PGRT_JSON_OBJECT)
        return model_fail(PGRT_EINVAL, CFG ": not a JSON object");
    int rc;
    if ((rc = read_arch(root, c)) || (rc = read_shape(root, c)) || (rc = read_norm_rope(root, c)) ||
        (rc = refuse_unsupported(root)))
        return rc;
    return read_arch_parts(root, c);
}

int pgrt_model_config_parse(const char *json, size_t len, pgrt_model_config *out)
{
    RT_NONNULL(__func__, out, "out");
    pgrt_json_limits lim = {.max_size = 1u << 24};
    pgrt_json *doc;
    int rc = pgrt_json_parse(json, len, &lim, CFG, &doc);
    if (rc)
        return rc;
    rc = config_from_json(pgrt_json_root(doc), out);
    pgrt_json_destroy(&doc);
    return rc;
}

int pgrt_model_config_load(const char *path, pgrt_model_config *out)
{
    char *text;
    size_t len;
    int rc = model_read_file(path, 1u << 24, &text, &len);
    if (rc)
        return rc;
    rc = pgrt_model_config_parse(text, len, out);
    free(text);
    return rc;
}

/* transformers' _compute_llama3_parameters (modeling_rope_utils.py), its
 * names shortened (old = old_context_len = original_max_position_embeddings,
 * low/high = low_freq_factor/high_freq_factor, x = inv_freq):
 *
 *   low_wavelen = old / low;  high_wavelen = old / high
 *   wavelen = 2 * math.pi / x
 *   llama = torch.where(wavelen > low_wavelen, x / factor, x)
 *   smooth = (old / wavelen - low) / (high - low)
 *   smoothed = (1 - smooth) * llama / factor + smooth * llama
 *   medium = ~(wavelen < high_wavelen) * ~(wavelen > low_wavelen)
 *   result = torch.where(medium, smoothed, llama)
 *
 * inv_freq is an f32 tensor; everything else is a Python number, a
 * double (int / int is true division too). How torch (CPU) evaluates each
 * tensor op with a Python number: the number becomes a 0-dim "wrapped"
 * tensor that does not promote the f32 tensor, so it is rounded to f32
 * first and the op runs in f32 (comparisons too: gt/lt promote their
 * inputs to the common dtype). scalar / tensor is Tensor.__rtruediv__,
 * which torch/_tensor.py writes as tensor.reciprocal() * scalar: two f32
 * roundings, not one division. tensor / scalar is a true f32 division
 * (CPU div_true_kernel: a / b). 1 - tensor is rsub, one rounding. No op
 * fuses with another: each is its own kernel, its result stored as f32.
 * So, with F(x) the rounding of x to f32: */
int pgrt_model_rope_scale(const pgrt_model_config *c, float *inv_freq, int n)
{
    RT_NONNULL(__func__, c, "c");
    if (n < 0)
        return model_fail(PGRT_EINVAL, "pgrt_model_rope_scale: n is %d, below 0", n);
    if (n > 0)
        RT_NONNULL(__func__, inv_freq, "inv_freq");
    if (c->rope.kind == PGRT_ROPE_DEFAULT)
        return 0;
    if (c->rope.kind != PGRT_ROPE_LLAMA3)
        return model_fail(PGRT_EINVAL, "pgrt_model_rope_scale: unknown rope kind %d",
                          (int)c->rope.kind);
    const pgrt_rope_scaling *r = &c->rope;
    /* Python: old_context_len / low_freq_factor etc. in f64, then F() where
     * they meet the tensor */
    const double old = (double)r->original_max_positions;
    const float low_wavelen = (float)(old / r->low_freq_factor);
    const float high_wavelen = (float)(old / r->high_freq_factor);
    const float two_pi = (float)(2 * 0x1.921fb54442d18p+1); /* F(2 * math.pi) */
    const float factor = (float)r->factor;
    const float old_f = (float)old;
    const float low = (float)r->low_freq_factor;
    const float span = (float)(r->high_freq_factor - r->low_freq_factor); /* f64 difference */
    for (int i = 0; i < n; i++) {
        /* One rounding a statement, no fused multiply-add: with c_std=c11
         * gcc contracts nothing (-ffp-contract=off); clang contracts only
         * within an expression, and not under the pragma. */
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#endif
        const float x = inv_freq[i];
        float w = 1.0f / x;       /* wavelen = F(F(1 / x) * F(2 pi)) */
        w = w * two_pi;
        float llama = x;          /* F(x / F(factor)) where wavelen > F(low_freq_wavelen) */
        if (w > low_wavelen)
            llama = x / factor;
        float s = 1.0f / w;       /* F(F(1 / wavelen) * F(old_context_len)) */
        s = s * old_f;
        s = s - low;              /* F(. - F(low_freq_factor)) */
        s = s / span;             /* F(. / F(high_freq_factor - low_freq_factor)) */
        float a = 1.0f - s;       /* F(1 - s) */
        a = a * llama;            /* F(. * inv_freq_llama) */
        a = a / factor;           /* F(. / F(factor)) */
        const float b = s * llama; /* F(s * inv_freq_llama) */
        const float smoothed = a + b;
        if (!(w < high_wavelen) && !(w > low_wavelen))
            inv_freq[i] = smoothed;
        else
            inv_freq[i] = llama;
    }
    return 0;
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

int pgrt_model_weight_specs(const pgrt_model_config *c, pgrt_weight_spec **specs, size_t *n)
{
    RT_NONNULL(__func__, c, "c");
    RT_NONNULL(__func__, specs, "specs");
    RT_NONNULL(__func__, n, "n");
    if (c->layers <= 0)
        return model_fail(PGRT_EINVAL, "pgrt_model_weight_specs: the config has %d layers",
                          c->layers);
    size_t per = 2 + PGRT_LINEAR_COUNT + (c->qkv_bias ? 3 : 0) + (c->o_bias ? 1 : 0) +
                 (c->qk_norm ? 2 : 0);
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
            if (m == PGRT_LINEAR_O && c->qk_norm) {
                spec(&s[k++], l, c->head_dim, 0, "model.layers.%d.self_attn.q_norm.weight", l);
                spec(&s[k++], l, c->head_dim, 0, "model.layers.%d.self_attn.k_norm.weight", l);
            }
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
    pgrt_model_config cfg;
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
    RT_NONNULL(__func__, dir, "dir");
    RT_NONNULL(__func__, out, "out");
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
        rc = pgrt_model_config_load(path, &m->cfg);
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
                            dir, t->name, pgrt_arch_name(m->cfg.arch));
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

const pgrt_model_config *pgrt_model_files_config(const pgrt_model_files *m)
{
    return m ? &m->cfg : NULL;
}

const pgrt_st_tensor *pgrt_model_tensor(const pgrt_model_files *m, const char *name)
{
    return m ? pgrt_st_set_find(m->set, name) : NULL;
}
