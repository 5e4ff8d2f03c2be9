/* SPDX-License-Identifier: MIT */
/*
 * pgrt_model: the file formats of a Hugging Face fine-tune, read and written
 * strictly, with no dependency beyond libc.
 *
 *   - safetensors: a memory-mapped reader that checks the header against
 *     the file, sharded models through model.safetensors.index.json, and an
 *     atomic writer of the canonical form;
 *   - config.json of Qwen2, LLaMA (Llama 3.x rope scaling included),
 *     Mistral and Qwen3 models, the weight names and shapes they imply,
 *     and a check of a model directory against them;
 *   - PEFT LoRA adapters: read, initialised as PEFT does, written;
 *   - token files of little-endian int32 ids.
 *
 * Everything here reads untrusted files: bad input gets a negative PGRT_E*
 * code and a one-line message (pgrt_last_message(): "config.json:
 * num_key_value_heads: 3 does not divide num_attention_heads 8"), never a
 * crash. PGRT_EINVAL: malformed or unsupported content; PGRT_ERANGE: a
 * value or size over a limit, a token id outside the vocabulary;
 * PGRT_ENOMEM. File-system failures are PGRT_EINVAL with the path and
 * strerror in the message. Text from the files or paths that a message
 * echoes is escaped (pg_text_escape, ptxgen.h): the messages of this layer
 * are one line of printable text.
 *
 * Ownership: objects come from a *_parse/_open/_load/_init function taking
 * `T **out` and go with the matching *_destroy/_close(&p), which sets p to
 * NULL. Pointers returned by getters are borrowed from their object and
 * live as long as it. Every function is thread-safe on distinct objects;
 * the read-only getters may be called concurrently on one object.
 */
#ifndef PTXGEN_PGRT_MODEL_H
#define PTXGEN_PGRT_MODEL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "pgrt.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ----------------------------------------------------------- safetensors */

#define PGRT_ST_DTYPE_MAP(X)                                                   \
    X(BOOL, 1) X(U8, 1) X(I8, 1) X(F8_E5M2, 1) X(F8_E4M3, 1) X(I16, 2)         \
    X(U16, 2) X(F16, 2) X(BF16, 2) X(I32, 4) X(U32, 4) X(F32, 4) X(F64, 8)     \
    X(I64, 8) X(U64, 8)

typedef enum pgrt_st_dtype {
#define PGRT_X_(name, size) PGRT_ST_##name,
    PGRT_ST_DTYPE_MAP(PGRT_X_)
#undef PGRT_X_
    PGRT_ST_DTYPE_COUNT
} pgrt_st_dtype;

PGRT_API const char *pgrt_st_dtype_name(pgrt_st_dtype t); /* "BF16" */
PGRT_API size_t pgrt_st_dtype_size(pgrt_st_dtype t);      /* bytes */

#define PGRT_ST_MAX_DIMS 8
#define PGRT_ST_MAX_HEADER ((uint64_t)100 * 1000 * 1000)

typedef struct pgrt_st_tensor {
    const char *name;
    pgrt_st_dtype dtype;
    int ndim;
    int64_t shape[PGRT_ST_MAX_DIMS];
    int64_t count;     /* product of the shape */
    const void *data;  /* little-endian, unaligned in general */
    size_t nbytes;
} pgrt_st_tensor;

typedef struct pgrt_st_file pgrt_st_file;

/* Map a file read-only and check it: 8-byte little-endian header size
 * (<= 100 MB and within the file), the header a JSON object of tensors
 * {"dtype", "shape", "data_offsets"} and an optional "__metadata__" object
 * of strings; every dtype known, shape dims >= 0, data_offsets [begin, end]
 * with end - begin = dtype size x element count, and the tensors tiling
 * the data section exactly: no gaps, no overlaps, nothing after. */
PGRT_API int pgrt_st_open(const char *path, pgrt_st_file **out);
/* The same checks on a buffer in memory, which must outlive the file
 * object (tensor data points into it). `what` names it in messages. */
PGRT_API int pgrt_st_parse(const void *buf, size_t len, const char *what, pgrt_st_file **out);
PGRT_API void pgrt_st_close(pgrt_st_file **f);
/* Tensors in name order. */
PGRT_API size_t pgrt_st_count(const pgrt_st_file *f);
PGRT_API const pgrt_st_tensor *pgrt_st_at(const pgrt_st_file *f, size_t i);
PGRT_API const pgrt_st_tensor *pgrt_st_find(const pgrt_st_file *f, const char *name);
/* The string value of key in the "__metadata__" object (safetensors
 * metadata maps strings to strings), borrowed from f; NULL when the file
 * has no metadata, no such key, or its value is not a string. */
PGRT_API const char *pgrt_st_metadata_get(const pgrt_st_file *f, const char *key);
/* Elements [first, first + n) of an F32, BF16 or F16 tensor as f32 into
 * dst (n floats, the caller's): BF16 and F16 widen exactly, F16 subnormals,
 * infinities and NaNs included. PGRT_EINVAL for another dtype, PGRT_ERANGE
 * for a range past the tensor. Thread-safe. */
PGRT_API int pgrt_st_tensor_to_f32(const pgrt_st_tensor *t, size_t first, size_t n, float *dst);

/* One tensor to write; data holds count x dtype size bytes, little-endian. */
typedef struct pgrt_st_out {
    const char *name;
    pgrt_st_dtype dtype;
    int ndim;
    int64_t shape[PGRT_ST_MAX_DIMS];
    const void *data;
} pgrt_st_out;

/* Write a safetensors file in the canonical form: tensors sorted by name
 * and laid out in that order, header JSON without spaces padded with
 * spaces to a multiple of 8 bytes, "__metadata__" (meta_keys/meta_values,
 * n_meta pairs of strings; may be 0) first. Atomic: a temporary file with
 * a short random name in the same directory (O_EXCL|O_NOFOLLOW, mode 0666
 * less the umask), fsync, rename over path; a replaced regular file keeps
 * its mode, a link at path is replaced rather than followed; on any error
 * the temporary file is removed and path is untouched. Duplicate or empty
 * names are refused. */
PGRT_API int pgrt_st_write(const char *path, const pgrt_st_out *tensors, size_t n,
                           const char *const *meta_keys, const char *const *meta_values,
                           size_t n_meta);

/* Atomically replace path with len bytes (same guarantees as above). */
PGRT_API int pgrt_file_write_atomic(const char *path, const void *data, size_t len);
/* Would pgrt_file_write_atomic(path) find its way? path is not a
 * directory and its directory exists and takes a new file (one is made and
 * removed there). For a check before long work whose result goes there;
 * the write may still fail later (a full disk). */
PGRT_API int pgrt_file_write_check(const char *path);

/* A set of safetensors files seen as one: a model directory holding
 * model.safetensors, or model.safetensors.index.json whose "weight_map"
 * names the shard of every tensor (shard names are plain file names in
 * the directory; each tensor must be in the shard named, names unique). */
typedef struct pgrt_st_set pgrt_st_set;
PGRT_API int pgrt_st_set_open(const char *dir, pgrt_st_set **out);
PGRT_API void pgrt_st_set_close(pgrt_st_set **s);
PGRT_API size_t pgrt_st_set_count(const pgrt_st_set *s);
PGRT_API const pgrt_st_tensor *pgrt_st_set_at(const pgrt_st_set *s, size_t i);
PGRT_API const pgrt_st_tensor *pgrt_st_set_find(const pgrt_st_set *s, const char *name);

/* ------------------------------------------------------ model config.json */

/* The model_type values read; each is the decoder transformers builds for
 * it (Qwen2ForCausalLM, LlamaForCausalLM, ...): RMSNorm, rotate-half
 * RoPE, causal GQA attention, SwiGLU, tied or untied head. */
typedef enum pgrt_arch {
    PGRT_ARCH_QWEN2,   /* q, k, v biases, never o's */
    PGRT_ARCH_LLAMA,   /* all four biases or none (attention_bias) */
    PGRT_ARCH_MISTRAL, /* LLaMA's layout without biases; full attention only */
    PGRT_ARCH_QWEN3,   /* q_norm and k_norm; all four biases or none */
} pgrt_arch;

/* "qwen2", "llama", "mistral", "qwen3": the model_type; "?" otherwise. */
PGRT_API const char *pgrt_arch_name(pgrt_arch a);

/* How the inverse frequencies of RoPE are made. PGRT_ROPE_DEFAULT:
 * inv_freq[i] = rope_theta^(-2i / head_dim). PGRT_ROPE_LLAMA3: the
 * default table rescaled as Llama 3.x does (pgrt_model_rope_scale). */
typedef enum pgrt_rope_kind {
    PGRT_ROPE_DEFAULT,
    PGRT_ROPE_LLAMA3,
} pgrt_rope_kind;

/* rope_scaling (transformers 4) or rope_parameters (transformers 5). The
 * numbers are set for PGRT_ROPE_LLAMA3 only (0 otherwise), as the JSON
 * gave them (doubles, the Python floats transformers computes with). */
typedef struct pgrt_rope_scaling {
    pgrt_rope_kind kind;
    double factor;          /* factor, > 0 (8 or 32 in Llama 3.x) */
    double low_freq_factor; /* low_freq_factor, > 0 */
    double high_freq_factor; /* high_freq_factor, > low_freq_factor */
    int64_t original_max_positions; /* original_max_position_embeddings, >= 1 */
} pgrt_rope_scaling;

typedef struct pgrt_model_config {
    pgrt_arch arch;
    int hidden;        /* hidden_size */
    int intermediate;  /* intermediate_size */
    int layers;        /* num_hidden_layers */
    int heads;         /* num_attention_heads */
    int kv_heads;      /* num_key_value_heads (default: heads; Mistral 8) */
    int head_dim;      /* head_dim (default: hidden / heads; Qwen3 128) */
    int vocab;         /* vocab_size */
    double rms_norm_eps; /* the norms' epsilon, q_norm's and k_norm's too */
    double rope_theta; /* default 10000 */
    bool tie_embeddings; /* tie_word_embeddings (default false) */
    bool qkv_bias;     /* Qwen2: always; LLaMA, Qwen3: attention_bias; Mistral: never */
    bool o_bias;       /* LLaMA, Qwen3: attention_bias */
    /* Qwen3: RMSNorm over each head's head_dim values of q and of k
     * (weights self_attn.q_norm / k_norm, [head_dim], eps rms_norm_eps),
     * after the projection (and its bias), before RoPE */
    bool qk_norm;
    /* max_position_embeddings; absent, transformers' default for the
     * model type (Qwen2, Qwen3 32768, LLaMA 2048, Mistral 131072) */
    int64_t max_positions;
    pgrt_rope_scaling rope;
} pgrt_model_config;

/* Parse a Hugging Face config.json: model_type qwen2, llama, mistral or
 * qwen3, with transformers' defaults for what is absent. Refused, naming
 * the field: another model_type; a missing or ill-typed required field;
 * rope_scaling or rope_parameters other than the default rope or llama3's
 * (linear, dynamic, yarn, longrope, ... named in the message), a llama3
 * setting missing or out of range (factor <= 0, low_freq_factor <= 0,
 * high_freq_factor <= low_freq_factor, original_max_position_embeddings
 * < 1), the two spellings disagreeing; partial_rotary_factor other than
 * 1; use_sliding_window true, a sliding layer in layer_types, Mistral's
 * sliding_window below max_position_embeddings (absent, transformers takes
 * 4096); hidden_act other than "silu"; LLaMA's mlp_bias true or
 * pretraining_tp other than 1; heads that do not divide (hidden by heads
 * without head_dim, heads by kv heads), an odd head_dim. Fields the
 * model type's transformers class does not read are ignored, as there
 * (Qwen2's and Mistral's attention_bias). */
PGRT_API int pgrt_model_config_parse(const char *json, size_t len, pgrt_model_config *out);
PGRT_API int pgrt_model_config_load(const char *path, pgrt_model_config *out);

/* Rescale a table of the default inverse frequencies in place, as
 * transformers does for c->rope (inv_freq[i] = rope_theta^(-2i/head_dim),
 * i < n = head_dim / 2, made by the caller). A no-op for the default rope.
 * For llama3 it is transformers' _compute_llama3_parameters, op for op
 * in the precision torch runs it on the CPU, where transformers builds the
 * table: the tensor ops in f32, each rounded once; the Python scalars
 * (factor, low/high_freq_factor, original_max_position_embeddings and
 * what is computed from them alone) in f64, rounded to f32 where an op
 * meets the tensor (config.c names each rounding). Given the same input
 * table the output is meant to be torch's bit for bit: that is reasoned
 * from torch's and transformers' sources, with worked values in
 * tests/model/hf.c that `reference.py rope-check` compares with
 * transformers itself. torch on a CUDA device divides by a scalar as a
 * multiplication by its f32 reciprocal, which can differ by an ulp in the
 * smoothed band; transformers builds the table on the CPU. The input
 * table is the caller's: torch makes it with an f32 pow that is not
 * correctly rounded everywhere. PGRT_EINVAL for a NULL c, n < 0, or a
 * NULL table with n > 0. */
PGRT_API int pgrt_model_rope_scale(const pgrt_model_config *c, float *inv_freq, int n);

/* -------------------------------------------------------------- weights */

/* The seven linear modules of a layer, in PEFT's usual order. */
#define PGRT_LINEAR_MAP(X)                                                     \
    X(Q, "q_proj", "self_attn") X(K, "k_proj", "self_attn")                    \
    X(V, "v_proj", "self_attn") X(O, "o_proj", "self_attn")                    \
    X(GATE, "gate_proj", "mlp") X(UP, "up_proj", "mlp")                        \
    X(DOWN, "down_proj", "mlp")

typedef enum pgrt_linear {
#define PGRT_X_(name, hf, block) PGRT_LINEAR_##name,
    PGRT_LINEAR_MAP(PGRT_X_)
#undef PGRT_X_
    PGRT_LINEAR_COUNT
} pgrt_linear;

PGRT_API const char *pgrt_linear_name(pgrt_linear m);  /* "q_proj" */
/* The module's input and output features under config c. */
PGRT_API void pgrt_linear_dims(const pgrt_model_config *c, pgrt_linear m, int *in, int *out);

typedef struct pgrt_weight_spec {
    char name[96];   /* "model.layers.3.self_attn.q_proj.weight" */
    int layer;       /* -1 outside the layers */
    int ndim;        /* 1 or 2 */
    int64_t shape[2];
} pgrt_weight_spec;

/* Every tensor the model needs, in a fixed order: the embedding; each
 * layer's input_layernorm, q/k/v/o_proj (each weight, then its bias where
 * the config has one), with qk_norm self_attn.q_norm and k_norm
 * ([head_dim]), post_attention_layernorm, gate/up/down_proj; the final
 * norm and the untied head. *specs is malloc'd; the caller frees it. */
PGRT_API int pgrt_model_weight_specs(const pgrt_model_config *c, pgrt_weight_spec **specs,
                                     size_t *n);

typedef struct pgrt_model_files pgrt_model_files;

/* Open a model directory: config.json parsed, the weights (single file or
 * sharded) opened, every expected tensor present with its shape and a
 * dtype of BF16, F16 or F32; the first problem is reported naming the
 * tensor. A tensor the model would not use is refused (a Qwen2 o_proj
 * bias or a Mistral q_norm would be silently wrong), except
 * rotary_emb.inv_freq buffers and a tied model's redundant lm_head.weight
 * of the right shape. */
PGRT_API int pgrt_model_open(const char *dir, pgrt_model_files **out);
PGRT_API void pgrt_model_close(pgrt_model_files **m);
PGRT_API const pgrt_model_config *pgrt_model_files_config(const pgrt_model_files *m);
/* A checked tensor by its Hugging Face name, or NULL. */
PGRT_API const pgrt_st_tensor *pgrt_model_tensor(const pgrt_model_files *m, const char *name);
/* The files pgrt_model_open read, each as the directory given joined with
 * its name: config.json, then model.safetensors, or
 * model.safetensors.index.json and every shard it names; i < count (else
 * NULL). The strings live as long as m. For a caller that must never
 * write over an input (ptxgen-train's outputs). */
PGRT_API size_t pgrt_model_file_count(const pgrt_model_files *m);
PGRT_API const char *pgrt_model_file_path(const pgrt_model_files *m, size_t i);

/* ------------------------------------------------------------- adapters */

/* One entry of PEFT's rank_pattern or alpha_pattern: a key (a module name,
 * a path's tail or a Python regular expression, see pgrt_adapter_pair) and
 * the r or lora_alpha it gives the pairs it matches. */
#define PGRT_ADAPTER_PATTERNS 64 /* entries of each of the two maps, at most */
#define PGRT_ADAPTER_KEY 160     /* bytes of a key, its NUL included */
typedef struct pgrt_adapter_pattern {
    char key[PGRT_ADAPTER_KEY];
    double value; /* rank_pattern: an integer in [1, 65536]; alpha_pattern: > 0, finite */
} pgrt_adapter_pattern;

typedef struct pgrt_adapter_config {
    int r;
    double alpha;
    unsigned targets; /* bit (1u << pgrt_linear) per target module */
    char base_model[512]; /* base_model_name_or_path ("" if absent/null) */
    bool rslora;          /* use_rslora: the scale is alpha / sqrt(r) */
    double dropout;       /* lora_dropout, 0 <= p < 1 (pgrt_lm: a counter-based mask) */
    /* Added after the fields above; zero keeps the earlier behaviour. */
    /* PEFT's rank_pattern and alpha_pattern, in their order: the r and the
     * lora_alpha of the pairs a key matches, instead of r and alpha
     * (pgrt_adapter_pair). Fill them with pgrt_adapter_pattern_add. */
    int n_rank_pattern, n_alpha_pattern;
    pgrt_adapter_pattern rank_pattern[PGRT_ADAPTER_PATTERNS];
    pgrt_adapter_pattern alpha_pattern[PGRT_ADAPTER_PATTERNS];
} pgrt_adapter_config;

/* The default LoRA scale: lora_alpha / r, or lora_alpha / sqrt(r) with
 * use_rslora (PEFT's rank-stabilised LoRA); the scale of every pair that
 * no pattern matches. A pair's own: pgrt_adapter_pair. */
PGRT_API double pgrt_adapter_scale(const pgrt_adapter_config *c);

/* What one pair (module m of layer `layer`) gets, as PEFT's LoraModel
 * gives it: its path "model.layers.<layer>.<block>.<module>" is matched
 * against each key of rank_pattern in order, the first key K for which
 * Python's re.match("(.*\\.)?(K)$", path) succeeds giving r (PEFT's
 * get_pattern_key: a key matches a whole path or a tail after a dot; "^"
 * in a key anchors it at the path's start), no match leaving the config's
 * r; the same of alpha_pattern for lora_alpha. A key that matches no
 * pair is allowed, as in PEFT. */
typedef struct pgrt_lora_setting {
    int r;
    double alpha;
    double scale;  /* alpha / r, or alpha / sqrt(r) with rslora */
    int rank_key;  /* the rank_pattern entry that gave r; -1: the config's r */
    int alpha_key; /* the alpha_pattern entry that gave alpha; -1: the config's */
} pgrt_lora_setting;

/* Resolve a pair (the keys are compiled on each call; pgrt_adapter_init
 * and _load resolve every pair of an adapter at once, into its
 * pgrt_lora). PGRT_EINVAL for a bad argument or key, PGRT_ERANGE for a
 * pattern map past its bounds. Thread-safe. */
PGRT_API int pgrt_adapter_pair(const pgrt_adapter_config *c, int layer, pgrt_linear m,
                               pgrt_lora_setting *out);

/* Append (key, value) to c's alpha_pattern (alpha) or rank_pattern:
 * refused, naming the map and the key and leaving c as it was, are a key
 * of PGRT_ADAPTER_KEY bytes or more, one the map holds already, one that
 * is not a regular expression this reader takes (see
 * pgrt_adapter_config_parse), a full map, a rank not an integer in [1,
 * 65536], an alpha not > 0 and finite. Thread-safe on distinct configs. */
PGRT_API int pgrt_adapter_pattern_add(pgrt_adapter_config *c, bool alpha, const char *key,
                                      double value);

/* Parse PEFT's adapter_config.json: peft_type "LORA" (if present), r > 0,
 * lora_alpha, use_rslora, target_modules (a list of module names, one
 * name, "all-linear", or a regular expression that PEFT full-matches
 * against each module's path, "model.layers.<i>.self_attn.q_proj"),
 * rank_pattern and alpha_pattern (objects of key: number, kept in the
 * file's order, each key compiled as target_modules' patterns are: a
 * Python regular expression read as a POSIX extended one with \d, \w and
 * (?: spelled the POSIX way), lora_dropout in [0, 1), bias "none" or
 * absent. Refused, naming the field and what is supported: a dropout
 * outside [0, 1), another bias, a module the models here lack, a pattern
 * that matches no module or some layers only, a rank_pattern or
 * alpha_pattern that is not an object, or one of their entries as
 * pgrt_adapter_pattern_add refuses it (naming the key), use_dora true,
 * modules_to_save, layers_to_transform, fan_in_fan_out true. */
PGRT_API int pgrt_adapter_config_parse(const char *json, size_t len, pgrt_adapter_config *out);

/* LoRA on one module of one layer: A [r, in], B [out, r], row-major f32,
 * r this pair's rank (pgrt_adapter_pair). */
typedef struct pgrt_lora {
    int layer;
    pgrt_linear module;
    int in, out;
    float *a;
    float *b;
    /* Added after the fields above: the pair's settings, as
     * pgrt_adapter_pair gives them for the adapter's config (set by
     * pgrt_adapter_init and _load; pgrt_adapter_save and pgrt_lm refuse a
     * pair whose r or scale is not its config's). */
    int r;
    double alpha, scale;
} pgrt_lora;

typedef struct pgrt_adapter {
    pgrt_adapter_config cfg;
    size_t count; /* layers x targets, layer-major, modules in enum order */
    pgrt_lora *w;
} pgrt_adapter;

/* PEFT's tensor name: base_model.model.model.layers.{l}.{block}.{m}.lora_{A,B}.weight */
PGRT_API int pgrt_lora_name(int layer, pgrt_linear m, bool b, char *buf, size_t len);

/* A fresh adapter as PEFT initialises one: each pair of the rank its
 * config's patterns give it (pgrt_adapter_pair), A Kaiming-uniform with
 * a = sqrt(5) (uniform in [-1/sqrt(in), 1/sqrt(in)]) from a generator
 * seeded with seed, B zero. Refused: a config pgrt_adapter_config_parse
 * would refuse, a pair whose scale is not a normal float (naming it). */
PGRT_API int pgrt_adapter_init(const pgrt_model_config *mc, const pgrt_adapter_config *cfg,
                               uint64_t seed, pgrt_adapter **out);
/* Read a PEFT adapter directory (adapter_config.json and
 * adapter_model.safetensors, tensors in F32/BF16/F16) for model mc: every
 * target of every layer present with its shape, [r, in] and [out, r] for
 * the pair's r (the patterns': a tensor of another shape is refused,
 * naming it and the shape expected); a tensor for a module the model
 * lacks is refused, naming it. */
PGRT_API int pgrt_adapter_load(const char *dir, const pgrt_model_config *mc, pgrt_adapter **out);
/* Write dir (created if missing) in PEFT format: adapter_model.safetensors
 * (F32) and adapter_config.json, as a pair: a reader never finds new
 * weights beside an old config or the other way round. A missing dir is
 * built as a fresh sibling directory renamed into place; in an existing
 * one, an unchanged config (an adapter saved over the one it was loaded
 * from) means one atomic rename of the weights, and otherwise the old
 * config is moved aside before the weights change and the new one renamed
 * in last; a failure puts the old pair back, a crash leaves the old pair,
 * the new one, or no config (docs/model.md). Other files in dir are left
 * alone. The config is written with rank_pattern and alpha_pattern as the
 * config holds them, keys in their order, so that PEFT and
 * pgrt_adapter_load give every pair the same r and alpha. A config or a
 * pair that pgrt_adapter_load would refuse is refused (an alpha, a key, a
 * pair whose r or scale is not what its config gives). */
PGRT_API int pgrt_adapter_save(const pgrt_adapter *a, const char *dir);
/* Would pgrt_adapter_save(dir) find its way? dir is a directory that takes
 * new files (one is made and removed there) and holds no directory at the
 * two names, or dir does not exist and its parent takes a new directory.
 * Nothing is left behind. For a check before a run whose result goes
 * there. */
PGRT_API int pgrt_adapter_save_check(const char *dir);
PGRT_API void pgrt_adapter_destroy(pgrt_adapter **a);

/* --------------------------------------------------------------- tokens */

typedef struct pgrt_tokens pgrt_tokens;

/* Read a file of little-endian int32 token ids; refused: an empty file, a
 * size not a multiple of 4, an id outside [0, vocab) (PGRT_ERANGE, naming
 * the id and its byte offset). */
PGRT_API int pgrt_tokens_open(const char *path, int64_t vocab, pgrt_tokens **out);
PGRT_API void pgrt_tokens_close(pgrt_tokens **t);
PGRT_API size_t pgrt_tokens_count(const pgrt_tokens *t);
/* Batch `step`: the n ids starting at step x n, wrapping to the start of
 * the file (as many times as needed), into out[0, n). */
PGRT_API void pgrt_tokens_batch(const pgrt_tokens *t, uint64_t step, size_t n, int32_t *out);

#ifdef __cplusplus
}
#endif

#endif /* PTXGEN_PGRT_MODEL_H */
