/* SPDX-License-Identifier: MIT */
/*
 * PEFT LoRA adapters: adapter_config.json + adapter_model.safetensors, read,
 * initialised and written as PEFT does, so that an adapter trained here
 * loads in PEFT and the other way round: per-module ranks and alphas
 * (rank_pattern, alpha_pattern) resolved as PEFT resolves them. Settings
 * that change the math and are not implemented (DoRA, modules_to_save,
 * layers_to_transform, ...) are refused, not ignored.
 */
#include "model_internal.h"

#include <errno.h>
#include <float.h>
#include <math.h>
#include <regex.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define ACFG "adapter_config.json"
#define AST "adapter_model.safetensors"

static int module_index(const char *s)
{
    for (int m = 0; m < PGRT_LINEAR_COUNT; m++)
        if (!strcmp(s, pgrt_linear_name((pgrt_linear)m)))
            return m;
    return -1;
}

static int target_name(const char *s, unsigned *targets)
{
    int m = module_index(s);
    if (m < 0)
        return model_fail(PGRT_EINVAL,
                          ACFG ": target_modules: '%.64s' is not a module of a decoder layer "
                               "(q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj)",
                          s);
    *targets |= 1u << m;
    return 0;
}

/* A Python regular expression (target_modules, a pattern key) as a POSIX
 * extended one between pre and post, with Python's \d, \w and (?: spelled
 * the POSIX way and other escapes kept; false if it does not fit cap
 * bytes. */
static bool py_ere(const char *pat, const char *pre, const char *post, char *ere, size_t cap)
{
    size_t o = strlen(pre), tail = strlen(post) + 1;
    if (o + tail > cap)
        return false;
    memcpy(ere, pre, o);
    for (const char *c = pat; *c; c++) {
        if (o + 16 + tail > cap) /* the longest replacement is 12 bytes */
            return false;
        const char *rep = NULL;
        if (c[0] == '\\' && c[1] == 'd')
            rep = "[0-9]";
        else if (c[0] == '\\' && c[1] == 'w')
            rep = "[A-Za-z0-9_]";
        else if (c[0] == '(' && c[1] == '?' && c[2] == ':') {
            ere[o++] = '(';
            c += 2;
            continue;
        }
        if (rep) {
            size_t n = strlen(rep);
            memcpy(ere + o, rep, n);
            o += n;
            c++;
            continue;
        }
        if (c[0] == '\\' && c[1])
            ere[o++] = *c++;
        ere[o++] = *c;
    }
    memcpy(ere + o, post, tail);
    return true;
}

/* A target_modules string that is not a module name: a Python regular
 * expression PEFT full-matches (re.fullmatch) against every module's path.
 * It is compiled as a POSIX extended expression anchored at both ends
 * (py_ere); the modules it selects must be the same in every layer (a
 * pattern that picks layers would be layers_to_transform, not
 * supported). */
static int target_pattern(const char *pat, unsigned *targets)
{
    char ere[1024];
    if (!py_ere(pat, "^(", ")$", ere, sizeof ere))
        return model_fail(PGRT_ERANGE, ACFG ": target_modules: the pattern is too long");
    regex_t re;
    if (regcomp(&re, ere, REG_EXTENDED | REG_NOSUB))
        return model_fail(PGRT_EINVAL, ACFG ": target_modules: '%.64s' is neither a module name "
                          "(q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj) nor a "
                          "regular expression this reader takes",
                          pat);
    unsigned first = 0;
    int rc = 0;
    for (int l = 0; l < 256 && !rc; l++) {
        unsigned got = 0;
        for (int m = 0; m < PGRT_LINEAR_COUNT; m++) {
            char path[96];
            snprintf(path, sizeof path, "model.layers.%d.%s.%s", l,
                     model_linear_block((pgrt_linear)m), pgrt_linear_name((pgrt_linear)m));
            if (regexec(&re, path, 0, NULL, 0) == 0)
                got |= 1u << m;
        }
        if (l == 0)
            first = got;
        else if (got != first)
            rc = model_fail(PGRT_EINVAL, ACFG ": target_modules: '%.64s' selects other modules "
                            "in layer %d than in layer 0: patterns that pick layers are not "
                            "supported (every layer gets the same targets)", pat, l);
    }
    regfree(&re);
    if (!rc && !first)
        rc = model_fail(PGRT_EINVAL, ACFG ": target_modules: '%.64s' matches no module "
                        "(paths look like model.layers.0.self_attn.q_proj)", pat);
    if (!rc)
        *targets |= first;
    return rc;
}

static double scale_of(double alpha, int r, bool rslora)
{
    return rslora ? alpha / sqrt((double)r) : alpha / r;
}

double pgrt_adapter_scale(const pgrt_adapter_config *c)
{
    if (!c || c->r <= 0)
        return 0;
    return scale_of(c->alpha, c->r, c->rslora);
}

static bool normal_scale(double scale) { return scale >= FLT_MIN && scale <= FLT_MAX; }

/* lora_alpha as the model uses it: the scale alpha / r, a float (lm.c). A
 * scale of 0 or a subnormal one trains nothing, an infinite one makes every
 * output NaN: alpha > 0 with alpha / r a normal float. One rule for what
 * is read, initialised and written, so that a saved adapter loads. */
static int check_alpha(const char *what, double alpha, int r, bool rslora)
{
    if (alpha > 0 && normal_scale(scale_of(alpha, r, rslora)))
        return 0;
    return model_fail(PGRT_ERANGE,
                      "%s: %g must be > 0, with lora_alpha / %s (r %d) a normal float "
                      "(%g to %g)",
                      what, alpha, rslora ? "sqrt(r)" : "r", r, (double)FLT_MIN,
                      (double)FLT_MAX);
}

/* ---------------------------------------------------------------- rank_pattern, alpha_pattern */

static const char *const map_name[2] = {"rank_pattern", "alpha_pattern"};

/* PEFT's get_pattern_key: key K matches path when
 * re.match(rf"(.*\.)?({K})$", path) does, a match from the path's start.
 * Compiled unanchored, the match found is the leftmost one (POSIX), which
 * starts at 0 whenever some match does. */
static int key_compile(const char *key, regex_t *re)
{
    char ere[8 * PGRT_ADAPTER_KEY];
    if (!py_ere(key, "(.*\\.)?(", ")$", ere, sizeof ere))
        return -1;
    return regcomp(re, ere, REG_EXTENDED) ? -1 : 0;
}

static bool key_matches(const regex_t *re, const char *path)
{
    regmatch_t m[1];
    return regexec(re, path, 1, m, 0) == 0 && m[0].rm_so == 0;
}

/* (key, value) as entry n of map `which` (map[0, n) before it); compiled
 * into *re when re is not NULL. `what` heads the message. */
static int entry_check(const char *what, int which, const char *key, double value,
                       const pgrt_adapter_pattern *map, int n, regex_t *re)
{
    const char *mn = map_name[which];
    if (strnlen(key, PGRT_ADAPTER_KEY) >= PGRT_ADAPTER_KEY)
        return model_fail(PGRT_ERANGE, "%s%s: key '%.48s...' is longer than %d bytes", what, mn,
                          key, PGRT_ADAPTER_KEY - 1);
    for (int i = 0; i < n; i++)
        if (!strncmp(map[i].key, key, PGRT_ADAPTER_KEY))
            return model_fail(PGRT_EINVAL, "%s%s: '%.64s' is given twice", what, mn, key);
    if (which == 0 ? !(value >= 1 && value <= 65536 && value == floor(value))
                   : !(value > 0 && isfinite(value)))
        return model_fail(PGRT_EINVAL, "%s%s: '%.64s': %g is not %s", what, mn, key, value,
                          which == 0 ? "a rank (an integer from 1 to 65536)"
                                     : "a lora_alpha (a finite number > 0)");
    regex_t tmp, *r = re ? re : &tmp;
    if (key_compile(key, r))
        return model_fail(PGRT_EINVAL, "%s%s: '%.64s' is not a regular expression this reader "
                          "takes (PEFT matches a key as a Python one, here read as a POSIX "
                          "extended one)", what, mn, key);
    if (!re)
        regfree(&tmp);
    return 0;
}

static int pattern_add(pgrt_adapter_config *c, int which, const char *key, double value,
                       const char *what)
{
    int *n = which ? &c->n_alpha_pattern : &c->n_rank_pattern;
    pgrt_adapter_pattern *map = which ? c->alpha_pattern : c->rank_pattern;
    if (*n < 0 || *n >= PGRT_ADAPTER_PATTERNS)
        return model_fail(PGRT_ERANGE, "%s%s: more than %d entries (one regular expression can "
                          "stand for many)", what, map_name[which], PGRT_ADAPTER_PATTERNS);
    int rc = entry_check(what, which, key, value, map, *n, NULL);
    if (rc)
        return rc;
    memcpy(map[*n].key, key, strlen(key) + 1);
    map[*n].value = value;
    (*n)++;
    return 0;
}

int pgrt_adapter_pattern_add(pgrt_adapter_config *c, bool alpha, const char *key, double value)
{
    RT_NONNULL(__func__, c, "c");
    RT_NONNULL(__func__, key, "key");
    return pattern_add(c, alpha ? 1 : 0, key, value, "");
}

struct model_lora_keys {
    int r;
    double alpha;
    bool rslora;
    int n[2]; /* [0] rank_pattern, [1] alpha_pattern */
    double v[2][PGRT_ADAPTER_PATTERNS];
    regex_t re[2][PGRT_ADAPTER_PATTERNS];
};

void model_lora_keys_free(model_lora_keys **k)
{
    if (!k || !*k)
        return;
    for (int w = 0; w < 2; w++)
        for (int i = 0; i < (*k)->n[w]; i++)
            regfree(&(*k)->re[w][i]);
    free(*k);
    *k = NULL;
}

int model_lora_keys_new(const pgrt_adapter_config *c, const char *what, model_lora_keys **out)
{
    *out = NULL;
    model_lora_keys *k = calloc(1, sizeof *k);
    if (!k)
        return model_fail(PGRT_ENOMEM, "out of memory");
    k->r = c->r;
    k->alpha = c->alpha;
    k->rslora = c->rslora;
    const int n[2] = {c->n_rank_pattern, c->n_alpha_pattern};
    const pgrt_adapter_pattern *maps[2] = {c->rank_pattern, c->alpha_pattern};
    int rc = 0;
    for (int w = 0; w < 2 && !rc; w++) {
        if (n[w] < 0 || n[w] > PGRT_ADAPTER_PATTERNS) {
            rc = model_fail(PGRT_ERANGE, "%s%s: %d entries: from 0 to %d", what, map_name[w],
                            n[w], PGRT_ADAPTER_PATTERNS);
            break;
        }
        for (int i = 0; i < n[w] && !rc; i++)
            if (!(rc = entry_check(what, w, maps[w][i].key, maps[w][i].value, maps[w], i,
                                   &k->re[w][i]))) {
                k->v[w][i] = maps[w][i].value;
                k->n[w] = i + 1;
            }
    }
    if (rc) {
        model_lora_keys_free(&k);
        return rc;
    }
    *out = k;
    return 0;
}

/* The path PEFT names the module by, inside the causal LM. */
static void module_path(int layer, pgrt_linear m, char *buf, size_t len)
{
    snprintf(buf, len, "model.layers.%d.%s.%s", layer, model_linear_block(m),
             pgrt_linear_name(m));
}

void model_lora_keys_pair(const model_lora_keys *k, int layer, pgrt_linear m,
                          pgrt_lora_setting *out)
{
    char path[96];
    module_path(layer, m, path, sizeof path);
    int hit[2] = {-1, -1};
    for (int w = 0; w < 2; w++)
        for (int i = 0; i < k->n[w] && hit[w] < 0; i++)
            if (key_matches(&k->re[w][i], path))
                hit[w] = i;
    out->rank_key = hit[0];
    out->alpha_key = hit[1];
    out->r = hit[0] >= 0 ? (int)k->v[0][hit[0]] : k->r;
    out->alpha = hit[1] >= 0 ? k->v[1][hit[1]] : k->alpha;
    out->scale = scale_of(out->alpha, out->r, k->rslora);
}

int pgrt_adapter_pair(const pgrt_adapter_config *c, int layer, pgrt_linear m,
                      pgrt_lora_setting *out)
{
    RT_NONNULL(__func__, c, "c");
    RT_NONNULL(__func__, out, "out");
    if (layer < 0 || (unsigned)m >= PGRT_LINEAR_COUNT || c->r <= 0)
        return model_fail(PGRT_EINVAL, "pgrt_adapter_pair: layer %d, linear %u, rank %d: a "
                          "layer >= 0, a pgrt_linear and a rank >= 1 are needed", layer,
                          (unsigned)m, c->r);
    model_lora_keys *k;
    int rc = model_lora_keys_new(c, "adapter: ", &k);
    if (rc)
        return rc;
    model_lora_keys_pair(k, layer, m, out);
    model_lora_keys_free(&k);
    return 0;
}

/* A pair's scale as the model uses it (check_alpha's rule), the pair
 * named with where its r and alpha came from. */
static int check_pair(const char *what, const pgrt_adapter_config *c, int layer, pgrt_linear m,
                      const pgrt_lora_setting *s)
{
    if (s->alpha > 0 && normal_scale(s->scale))
        return 0;
    char path[96], fa[96], fr[96];
    module_path(layer, m, path, sizeof path);
    if (s->alpha_key >= 0)
        snprintf(fa, sizeof fa, "alpha_pattern '%.64s'", c->alpha_pattern[s->alpha_key].key);
    else
        snprintf(fa, sizeof fa, "lora_alpha");
    if (s->rank_key >= 0)
        snprintf(fr, sizeof fr, "rank_pattern '%.64s'", c->rank_pattern[s->rank_key].key);
    else
        snprintf(fr, sizeof fr, "r");
    return model_fail(PGRT_ERANGE,
                      "%s%s: lora_alpha / %s = %g / %d (from %s and %s) is not a normal float "
                      "(%g to %g)",
                      what, path, c->rslora ? "sqrt(r)" : "r", s->alpha, s->r, fa, fr,
                      (double)FLT_MIN, (double)FLT_MAX);
}

/* rank_pattern or alpha_pattern of adapter_config.json into out: absent,
 * null or empty, or an object of key: number, in its order. */
static int parse_patterns(const pgrt_jval *root, int which, pgrt_adapter_config *out)
{
    const char *field = map_name[which];
    const pgrt_jval *v = pgrt_jval_member(root, field);
    if (!v || pgrt_jval_is_null(v))
        return 0;
    pgrt_json_type t = pgrt_jval_type(v);
    if (t == PGRT_JSON_ARRAY && pgrt_jval_count(v) == 0)
        return 0;
    if (t != PGRT_JSON_OBJECT)
        return model_fail(PGRT_EINVAL, ACFG ": %s: not an object (PEFT's {module name or "
                          "pattern: %s})", field, which ? "lora_alpha" : "r");
    for (size_t i = 0; i < pgrt_jval_count(v); i++) {
        const char *key = pgrt_jval_key_at(v, i);
        const pgrt_jval *x = pgrt_jval_value_at(v, i);
        double value;
        int rc;
        if (which == 0) {
            int64_t r;
            if ((rc = pgrt_jval_int64(x, 1, 65536, &r)))
                return model_fail(rc, ACFG ": rank_pattern: '%.64s': not a rank (an integer "
                                  "from 1 to 65536)", key);
            value = (double)r;
        } else if (pgrt_jval_double(x, &value))
            return model_fail(PGRT_EINVAL, ACFG ": alpha_pattern: '%.64s': not a number", key);
        if ((rc = pattern_add(out, which, key, value, ACFG ": ")))
            return rc;
    }
    return 0;
}

/* absent, null, or an empty list/object */
static int must_be_empty(const pgrt_jval *root, const char *field)
{
    const pgrt_jval *v = pgrt_jval_member(root, field);
    if (!v || pgrt_jval_is_null(v))
        return 0;
    pgrt_json_type t = pgrt_jval_type(v);
    if ((t == PGRT_JSON_ARRAY || t == PGRT_JSON_OBJECT) && pgrt_jval_count(v) == 0)
        return 0;
    return model_fail(PGRT_EINVAL, ACFG ": %s: not supported (must be empty)", field);
}

static int must_be_false(const pgrt_jval *root, const char *field)
{
    bool b = false;
    int rc = model_bool_opt(root, ACFG, field, &b);
    if (rc < 0)
        return rc;
    if (b)
        return model_fail(PGRT_EINVAL, ACFG ": %s: true is not supported", field);
    return 0;
}

int pgrt_adapter_config_parse(const char *json, size_t len, pgrt_adapter_config *out)
{
    RT_NONNULL(__func__, out, "out");
    memset(out, 0, sizeof *out);
    pgrt_json_limits lim = {.max_size = 1u << 24};
    pgrt_json *doc;
    int rc = pgrt_json_parse(json, len, &lim, ACFG, &doc);
    if (rc)
        return rc;
    const pgrt_jval *root = pgrt_json_root(doc);
    const char *s;
    int64_t r;
    if (pgrt_jval_type(root) != PGRT_JSON_OBJECT) {
        rc = model_fail(PGRT_EINVAL, ACFG ": not a JSON object");
        goto done;
    }
    if ((rc = model_string_opt(root, ACFG, "peft_type", &s)) < 0)
        goto done;
    if (s && strcmp(s, "LORA")) {
        rc = model_fail(PGRT_EINVAL, ACFG ": peft_type: '%.32s' is not supported (LORA)", s);
        goto done;
    }
    if ((rc = model_int_req(root, ACFG, "r", 1, 65536, &r)))
        goto done;
    out->r = (int)r;
    out->alpha = 8; /* PEFT's default */
    if ((rc = model_double_opt(root, ACFG, "lora_alpha", &out->alpha)) < 0)
        goto done;
    if ((rc = model_bool_opt(root, ACFG, "use_rslora", &out->rslora)) < 0)
        goto done;
    if ((rc = check_alpha(ACFG ": lora_alpha", out->alpha, out->r, out->rslora)))
        goto done;
    const pgrt_jval *tm = pgrt_jval_member(root, "target_modules");
    if ((s = pgrt_jval_string(tm, NULL))) {
        if (!strcmp(s, "all-linear"))
            out->targets = (1u << PGRT_LINEAR_COUNT) - 1;
        else if ((rc = module_index(s) >= 0 ? target_name(s, &out->targets)
                                            : target_pattern(s, &out->targets)))
            goto done;
    } else if (pgrt_jval_type(tm) == PGRT_JSON_ARRAY && !pgrt_jval_is_null(tm)) {
        for (size_t i = 0; i < pgrt_jval_count(tm); i++) {
            const char *n = pgrt_jval_string(pgrt_jval_item(tm, i), NULL);
            if (!n) {
                rc = model_fail(PGRT_EINVAL, ACFG ": target_modules[%zu]: not a string", i);
                goto done;
            }
            if ((rc = target_name(n, &out->targets)))
                goto done;
        }
    }
    if (!out->targets) {
        rc = model_fail(PGRT_EINVAL, ACFG ": target_modules: missing or empty");
        goto done;
    }
    if ((rc = model_double_opt(root, ACFG, "lora_dropout", &out->dropout)) < 0)
        goto done;
    if (!(out->dropout >= 0 && out->dropout < 1)) {
        rc = model_fail(PGRT_EINVAL, ACFG ": lora_dropout: %g must be in [0, 1)", out->dropout);
        goto done;
    }
    if ((rc = model_string_opt(root, ACFG, "bias", &s)) < 0)
        goto done;
    if (s && strcmp(s, "none")) {
        rc = model_fail(PGRT_EINVAL, ACFG ": bias: '%.32s' is not supported (none)", s);
        goto done;
    }
    if ((rc = must_be_false(root, "use_dora")) ||
        (rc = must_be_false(root, "fan_in_fan_out")) ||
        (rc = must_be_empty(root, "modules_to_save")) ||
        (rc = must_be_empty(root, "layers_to_transform")) ||
        (rc = parse_patterns(root, 0, out)) || (rc = parse_patterns(root, 1, out)) ||
        (rc = must_be_empty(root, "exclude_modules")) ||
        (rc = must_be_empty(root, "target_parameters")))
        goto done;
    if ((rc = model_string_opt(root, ACFG, "base_model_name_or_path", &s)) < 0)
        goto done;
    rc = 0;
    if (s) {
        if (strlen(s) >= sizeof out->base_model) {
            rc = model_fail(PGRT_ERANGE, ACFG ": base_model_name_or_path: too long");
            goto done;
        }
        strcpy(out->base_model, s);
    }
done:
    pgrt_json_destroy(&doc);
    return rc;
}

int pgrt_lora_name(int layer, pgrt_linear m, bool b, char *buf, size_t len)
{
    RT_NONNULL(__func__, buf, "buf");
    if ((unsigned)m >= PGRT_LINEAR_COUNT || layer < 0)
        return model_fail(PGRT_EINVAL, "pgrt_lora_name: layer %d, linear %u: a layer >= 0 and "
                          "a pgrt_linear are needed", layer, (unsigned)m);
    int n = snprintf(buf, len, "base_model.model.model.layers.%d.%s.%s.lora_%c.weight", layer,
                     model_linear_block(m), pgrt_linear_name(m), b ? 'B' : 'A');
    if (n < 0 || (size_t)n >= len)
        return model_fail(PGRT_ERANGE, "pgrt_lora_name: buffer too small");
    return 0;
}

static int alloc_adapter(const pgrt_model_config *mc, const pgrt_adapter_config *cfg,
                         pgrt_adapter **out)
{
    *out = NULL;
    if (!mc || !cfg || cfg->r <= 0 || !cfg->targets ||
        cfg->targets >= (1u << PGRT_LINEAR_COUNT) || mc->layers <= 0)
        return model_fail(PGRT_EINVAL, "adapter: bad configuration");
    int rc = check_alpha("adapter: lora_alpha", cfg->alpha, cfg->r, cfg->rslora);
    model_lora_keys *keys = NULL;
    if (rc || (rc = model_lora_keys_new(cfg, "adapter: ", &keys)))
        return rc;
    pgrt_adapter *a = calloc(1, sizeof *a);
    int nt = 0;
    for (int m = 0; m < PGRT_LINEAR_COUNT; m++)
        nt += (cfg->targets >> m) & 1;
    if (a)
        a->w = calloc((size_t)mc->layers * (size_t)nt, sizeof *a->w);
    if (!a || !a->w) {
        free(a);
        model_lora_keys_free(&keys);
        return model_fail(PGRT_ENOMEM, "out of memory");
    }
    a->cfg = *cfg;
    for (int l = 0; l < mc->layers && !rc; l++)
        for (int m = 0; m < PGRT_LINEAR_COUNT && !rc; m++) {
            if (!((cfg->targets >> m) & 1))
                continue;
            pgrt_lora *w = &a->w[a->count++];
            w->layer = l;
            w->module = (pgrt_linear)m;
            pgrt_linear_dims(mc, w->module, &w->in, &w->out);
            pgrt_lora_setting st;
            model_lora_keys_pair(keys, l, w->module, &st);
            if ((rc = check_pair("adapter: ", cfg, l, w->module, &st)))
                break;
            w->r = st.r;
            w->alpha = st.alpha;
            w->scale = st.scale;
            w->a = malloc((size_t)w->r * (size_t)w->in * sizeof *w->a);
            w->b = calloc((size_t)w->out * (size_t)w->r, sizeof *w->b);
            if (!w->a || !w->b)
                rc = model_fail(PGRT_ENOMEM, "out of memory for the adapter");
        }
    model_lora_keys_free(&keys);
    if (rc) {
        pgrt_adapter_destroy(&a);
        return rc;
    }
    *out = a;
    return 0;
}

static uint64_t splitmix(uint64_t *s)
{
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

int pgrt_adapter_init(const pgrt_model_config *mc, const pgrt_adapter_config *cfg,
                      uint64_t seed, pgrt_adapter **out)
{
    RT_NONNULL(__func__, out, "out");
    int rc = alloc_adapter(mc, cfg, out);
    if (rc)
        return rc;
    uint64_t s = seed;
    for (size_t i = 0; i < (*out)->count; i++) {
        pgrt_lora *w = &(*out)->w[i];
        /* kaiming_uniform_(a=sqrt(5)): gain sqrt(2/(1+5)), bound
         * gain*sqrt(3/fan_in) = 1/sqrt(fan_in) */
        double bound = 1.0 / sqrt((double)w->in);
        size_t n = (size_t)w->r * (size_t)w->in;
        for (size_t k = 0; k < n; k++) {
            double u = (double)(splitmix(&s) >> 11) * 0x1.0p-53;
            w->a[k] = (float)((2 * u - 1) * bound);
        }
    }
    return 0;
}

static int load_matrix(const pgrt_st_file *f, const char *dir, int layer, pgrt_linear m, bool b,
                       int64_t d0, int64_t d1, float *dst)
{
    char name[160];
    int rc = pgrt_lora_name(layer, m, b, name, sizeof name);
    if (rc)
        return rc;
    const pgrt_st_tensor *t = pgrt_st_find(f, name);
    if (!t)
        return model_fail(PGRT_EINVAL, "%s: tensor '%s' missing", dir, name);
    if (t->ndim != 2 || t->shape[0] != d0 || t->shape[1] != d1)
        return model_fail(PGRT_EINVAL, "%s: tensor '%s': shape is not [%lld, %lld] (this "
                          "pair's r is %lld)", dir, name, (long long)d0, (long long)d1,
                          (long long)(b ? d1 : d0));
    if (t->dtype != PGRT_ST_F32 && t->dtype != PGRT_ST_BF16 && t->dtype != PGRT_ST_F16)
        return model_fail(PGRT_EINVAL,
                          "%s: tensor '%s': dtype %s is not supported (F32, BF16, F16)", dir,
                          name, pgrt_st_dtype_name(t->dtype));
    return pgrt_st_tensor_to_f32(t, 0, (size_t)t->count, dst);
}

/* Is name one of ours? Then nothing to report. Otherwise say why not. */
static int check_extra(const char *dir, const char *name, const pgrt_model_config *mc,
                       unsigned targets)
{
    const char *pre = "base_model.model.model.layers.";
    if (strncmp(name, pre, strlen(pre)))
        return model_fail(PGRT_EINVAL, "%s: tensor '%s' names a module the model lacks", dir, name);
    char *end;
    errno = 0;
    long l = strtol(name + strlen(pre), &end, 10);
    if (errno || l < 0 || l >= mc->layers || *end != '.')
        return model_fail(PGRT_EINVAL, "%s: tensor '%s' names a layer the model lacks (%d layers)",
                          dir, name, mc->layers);
    for (int m = 0; m < PGRT_LINEAR_COUNT; m++)
        for (int b = 0; b < 2; b++) {
            char want[160];
            if (pgrt_lora_name((int)l, (pgrt_linear)m, b, want, sizeof want) == 0 &&
                !strcmp(want, name))
                return (targets >> m) & 1
                           ? 0
                           : model_fail(PGRT_EINVAL,
                                        "%s: tensor '%s': %s is not in target_modules", dir,
                                        name, pgrt_linear_name((pgrt_linear)m));
        }
    return model_fail(PGRT_EINVAL, "%s: tensor '%s' names a module the model lacks", dir, name);
}

int pgrt_adapter_load(const char *dir, const pgrt_model_config *mc, pgrt_adapter **out)
{
    RT_NONNULL(__func__, dir, "dir");
    RT_NONNULL(__func__, mc, "mc");
    RT_NONNULL(__func__, out, "out");
    *out = NULL;
    char path[4096];
    char *text = NULL;
    size_t len;
    pgrt_adapter_config cfg;
    pgrt_st_file *f = NULL;
    pgrt_adapter *a = NULL;
    int rc = model_path_join(path, sizeof path, dir, ACFG);
    if (!rc)
        rc = model_read_file(path, 1u << 24, &text, &len);
    if (!rc)
        rc = pgrt_adapter_config_parse(text, len, &cfg);
    free(text);
    if (!rc)
        rc = model_path_join(path, sizeof path, dir, AST);
    if (!rc)
        rc = pgrt_st_open(path, &f);
    if (!rc)
        rc = alloc_adapter(mc, &cfg, &a);
    for (size_t i = 0; !rc && i < pgrt_st_count(f); i++)
        rc = check_extra(path, pgrt_st_at(f, i)->name, mc, cfg.targets);
    for (size_t i = 0; !rc && a && i < a->count; i++) {
        pgrt_lora *w = &a->w[i];
        rc = load_matrix(f, path, w->layer, w->module, false, w->r, w->in, w->a);
        if (!rc)
            rc = load_matrix(f, path, w->layer, w->module, true, w->out, w->r, w->b);
    }
    pgrt_st_close(&f);
    if (rc) {
        pgrt_adapter_destroy(&a);
        return rc;
    }
    *out = a;
    return 0;
}

static void put_number(model_buf *b, double x)
{
    if (x == floor(x) && fabs(x) < 1e15)
        model_buf_printf(b, "%lld", (long long)x);
    else
        model_buf_printf(b, "%.17g", x);
}

/* A pattern map as a JSON object, its keys in their order (PEFT's reader
 * keeps it: the first key that matches wins). */
static void put_patterns(model_buf *b, const pgrt_adapter_pattern *map, int n, bool rank)
{
    if (n <= 0) {
        model_buf_put(b, "{}", 2);
        return;
    }
    model_buf_put(b, "{", 1);
    for (int i = 0; i < n; i++) {
        model_buf_put(b, i ? ",\n    " : "\n    ", i ? 6 : 5);
        model_buf_json_string(b, map[i].key);
        model_buf_put(b, ": ", 2);
        if (rank)
            model_buf_printf(b, "%d", (int)map[i].value);
        else
            put_number(b, map[i].value);
    }
    model_buf_put(b, "\n  }", 4);
}

int pgrt_adapter_save(const pgrt_adapter *a, const char *dir)
{
    RT_NONNULL(__func__, a, "a");
    RT_NONNULL(__func__, dir, "dir");
    /* never write what pgrt_adapter_load would refuse */
    int arc = check_alpha("adapter: lora_alpha", a->cfg.alpha, a->cfg.r, a->cfg.rslora);
    model_lora_keys *keys = NULL;
    if (arc || (arc = model_lora_keys_new(&a->cfg, "adapter: ", &keys)))
        return arc;
    for (size_t i = 0; i < a->count && !arc; i++) {
        const pgrt_lora *w = &a->w[i];
        pgrt_lora_setting st;
        model_lora_keys_pair(keys, w->layer, w->module, &st);
        if (st.r != w->r || st.scale != w->scale)
            arc = model_fail(PGRT_EINVAL, "adapter: layer %d %s: r %d and scale %g are not "
                             "what its config gives (r %d, scale %g)", w->layer,
                             pgrt_linear_name(w->module), w->r, w->scale, st.r, st.scale);
        else
            arc = check_pair("adapter: ", &a->cfg, w->layer, w->module, &st);
    }
    model_lora_keys_free(&keys);
    if (arc)
        return arc;
    size_t nt = 2 * a->count;
    pgrt_st_out *t = calloc(nt ? nt : 1, sizeof *t);
    char (*names)[160] = calloc(nt ? nt : 1, sizeof *names);
    model_buf cj = {0};
    model_st_image img = {0};
    int rc = 0;
    if (!t || !names) {
        rc = model_fail(PGRT_ENOMEM, "out of memory");
        goto done;
    }
    for (size_t i = 0; i < a->count && !rc; i++) {
        const pgrt_lora *w = &a->w[i];
        for (int b = 0; b < 2 && !rc; b++) {
            pgrt_st_out *o = &t[2 * i + (size_t)b];
            rc = pgrt_lora_name(w->layer, w->module, b, names[2 * i + (size_t)b], sizeof *names);
            o->name = names[2 * i + (size_t)b];
            o->dtype = PGRT_ST_F32;
            o->ndim = 2;
            o->shape[0] = b ? w->out : w->r;
            o->shape[1] = b ? w->r : w->in;
            o->data = b ? w->b : w->a;
        }
    }
    if (rc)
        goto done;
    char path[4096];
    const char *mk[] = {"format"}, *mv[] = {"pt"};
    if ((rc = model_path_join(path, sizeof path, dir, AST)) ||
        (rc = model_st_image_build(path, t, nt, mk, mv, 1, &img)))
        goto done;
    /* the fields PEFT reads to rebuild the LoraConfig, in its key order */
    model_buf_printf(&cj, "{\n  \"alpha_pattern\": ");
    put_patterns(&cj, a->cfg.alpha_pattern, a->cfg.n_alpha_pattern, false);
    /* no space after this colon: the bytes earlier versions wrote */
    model_buf_printf(&cj, ",\n  \"base_model_name_or_path\":");
    if (a->cfg.base_model[0])
        model_buf_json_string(&cj, a->cfg.base_model);
    else
        model_buf_put(&cj, "null", 4);
    model_buf_printf(&cj, ",\n  \"bias\": \"none\",\n  \"fan_in_fan_out\": false,\n"
                          "  \"inference_mode\": true,\n  \"init_lora_weights\": true,\n"
                          "  \"layers_pattern\": null,\n  \"layers_to_transform\": null,\n"
                          "  \"lora_alpha\": ");
    put_number(&cj, a->cfg.alpha);
    model_buf_printf(&cj, ",\n  \"lora_dropout\": ");
    put_number(&cj, a->cfg.dropout);
    model_buf_printf(&cj, ",\n  \"modules_to_save\": null,\n"
                          "  \"peft_type\": \"LORA\",\n  \"r\": %d,\n  \"rank_pattern\": ",
                     a->cfg.r);
    put_patterns(&cj, a->cfg.rank_pattern, a->cfg.n_rank_pattern, true);
    model_buf_printf(&cj, ",\n  \"revision\": null,\n  \"target_modules\": [");
    bool first = true;
    for (int m = 0; m < PGRT_LINEAR_COUNT; m++)
        if ((a->cfg.targets >> m) & 1) {
            model_buf_printf(&cj, "%s\n    \"%s\"", first ? "" : ",",
                             pgrt_linear_name((pgrt_linear)m));
            first = false;
        }
    model_buf_printf(&cj, "\n  ],\n  \"task_type\": \"CAUSAL_LM\",\n  \"use_dora\": false,\n"
                          "  \"use_rslora\": %s\n}\n", a->cfg.rslora ? "true" : "false");
    if (cj.err) {
        rc = model_fail(cj.err, "%s: building " ACFG " failed", dir);
        goto done;
    }
    /* The weights and the config change together: adapter_config.json is
     * the commit (pgrt_pair_replace): a new directory appears whole; in
     * place, an unchanged config means one rename of the weights; else the
     * old config goes aside first, so that new weights never sit beside
     * an old config, and a failure puts the old pair back. */
    pgrt_span cspan = {cj.p, cj.len};
    pgrt_dir_file wf = {AST, img.parts, img.nparts}, cf = {ACFG, &cspan, 1};
    int e = pgrt_pair_replace(dir, &wf, &cf, true);
    if (e)
        rc = model_fail(e == ENOMEM ? PGRT_ENOMEM : PGRT_EINVAL, "%s: %s", dir,
                        e == ENOTDIR ? "not a directory" : strerror(e));
done:
    model_st_image_free(&img);
    free(t);
    free(names);
    free(cj.p);
    return rc;
}

int pgrt_adapter_save_check(const char *dir)
{
    RT_NONNULL(__func__, dir, "dir");
    int e = pgrt_pair_replace_check(dir, AST, ACFG);
    if (!e)
        return 0;
    struct stat st;
    bool there = stat(dir, &st) == 0, link = !there && lstat(dir, &st) == 0;
    if (e == ENOTDIR && there)
        return model_fail(PGRT_EINVAL, "%s: not a directory", dir);
    if (e == EISDIR)
        return model_fail(PGRT_EINVAL, "%s: " AST " or " ACFG " in it is a directory", dir);
    if (e == ENOENT && link)
        return model_fail(PGRT_EINVAL, "%s: a symbolic link to nothing", dir);
    if (e == ENOENT && !there)
        return model_fail(PGRT_EINVAL, "%s: cannot create it: the directory it would go in "
                                       "does not exist",
                          dir);
    return model_fail(e == ENOMEM ? PGRT_ENOMEM : PGRT_EINVAL, "%s: cannot write there: %s", dir,
                      strerror(e));
}

void pgrt_adapter_destroy(pgrt_adapter **a)
{
    if (!a || !*a)
        return;
    for (size_t i = 0; i < (*a)->count; i++) {
        free((*a)->w[i].a);
        free((*a)->w[i].b);
    }
    free((*a)->w);
    free(*a);
    *a = NULL;
}
