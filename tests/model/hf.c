/* SPDX-License-Identifier: MIT */
/* config.json, the weight map and model directories, PEFT adapters and
 * token files, each with the refusals a user would meet. */
#include "model_util.h"
#include "ptxgen/pgrt_lm.h"
#include "ptxgen/pgrt_model.h"
#include "test.h"

#include <math.h>
#include <stdlib.h>
#include <sys/stat.h>

/* Qwen2.5-0.5B's config.json as transformers writes it. */
static const char qwen_cfg[] =
    "{\n  \"architectures\": [\"Qwen2ForCausalLM\"],\n  \"attention_dropout\": 0.0,\n"
    "  \"bos_token_id\": 151643,\n  \"eos_token_id\": 151643,\n  \"hidden_act\": \"silu\",\n"
    "  \"hidden_size\": 896,\n  \"initializer_range\": 0.02,\n  \"intermediate_size\": 4864,\n"
    "  \"max_position_embeddings\": 32768,\n  \"max_window_layers\": 24,\n"
    "  \"model_type\": \"qwen2\",\n  \"num_attention_heads\": 14,\n"
    "  \"num_hidden_layers\": 24,\n  \"num_key_value_heads\": 2,\n  \"rms_norm_eps\": 1e-06,\n"
    "  \"rope_scaling\": null,\n  \"rope_theta\": 1000000.0,\n  \"sliding_window\": 32768,\n"
    "  \"tie_word_embeddings\": true,\n  \"torch_dtype\": \"bfloat16\",\n"
    "  \"transformers_version\": \"4.43.1\",\n  \"use_cache\": true,\n"
    "  \"use_sliding_window\": false,\n  \"vocab_size\": 151936\n}\n";

static int cfg_parse(const char *s, pgrt_model_config *c)
{
    return pgrt_model_config_parse(s, strlen(s), c);
}

/* A small config of model type mt with one field replaced or added
 * (after the brace). */
static int cfg_mt(const char *mt, const char *extra, pgrt_model_config *c)
{
    char buf[2048];
    snprintf(buf, sizeof buf,
             "{%s\"model_type\":\"%s\",\"hidden_size\":64,\"intermediate_size\":128,"
             "\"num_hidden_layers\":2,\"num_attention_heads\":4,\"vocab_size\":256,"
             "\"rms_norm_eps\":1e-5}",
             extra, mt);
    return cfg_parse(buf, c);
}

static int cfg_with(const char *extra, pgrt_model_config *c)
{
    return cfg_mt("llama", extra, c);
}

#define CFG_MT_REFUSED(mt, extra, want)                                        \
    do {                                                                       \
        pgrt_model_config c_;                                                     \
        REQUIRE(cfg_mt((mt), (extra), &c_) < 0);                               \
        REQUIRE_CONTAINS(pgrt_last_message(), (want));                         \
    } while (0)
#define CFG_REFUSED(extra, want) CFG_MT_REFUSED("llama", extra, want)

static void test_config(void)
{
    pgrt_model_config c;
    REQUIRE_INT_EQ(cfg_parse(qwen_cfg, &c), 0);
    REQUIRE_INT_EQ(c.arch, PGRT_ARCH_QWEN2);
    REQUIRE_INT_EQ(c.hidden, 896);
    REQUIRE_INT_EQ(c.intermediate, 4864);
    REQUIRE_INT_EQ(c.layers, 24);
    REQUIRE_INT_EQ(c.heads, 14);
    REQUIRE_INT_EQ(c.kv_heads, 2);
    REQUIRE_INT_EQ(c.head_dim, 64);
    REQUIRE_INT_EQ(c.vocab, 151936);
    REQUIRE(c.rms_norm_eps == 1e-6);
    REQUIRE(c.rope_theta == 1e6);
    REQUIRE(c.tie_embeddings && c.qkv_bias && !c.o_bias);

    REQUIRE_INT_EQ(cfg_with("", &c), 0);
    REQUIRE(c.arch == PGRT_ARCH_LLAMA && c.kv_heads == 4 && c.head_dim == 16);
    REQUIRE(c.rope_theta == 10000.0 && !c.tie_embeddings && !c.qkv_bias && !c.o_bias);
    REQUIRE_INT_EQ(cfg_with("\"attention_bias\":true,\"head_dim\":32,", &c), 0);
    REQUIRE(c.qkv_bias && c.o_bias && c.head_dim == 32);
    REQUIRE_INT_EQ(cfg_with("\"rope_scaling\":{\"rope_type\":\"default\"},"
                            "\"rope_parameters\":{\"rope_type\":\"default\",\"rope_theta\":5e5},"
                            "\"layer_types\":[\"full_attention\",\"full_attention\"],",
                            &c),
                   0);
    REQUIRE(c.rope_theta == 5e5);

    CFG_REFUSED("\"model_type\":\"mistral\",", "duplicate key \"model_type\"");
    REQUIRE(cfg_parse("{\"model_type\":\"gemma\"}", &c) == PGRT_EINVAL);
    REQUIRE_CONTAINS(pgrt_last_message(), "config.json: model_type: 'gemma' is not supported "
                                          "(qwen2, llama, mistral, qwen3)");
    REQUIRE(cfg_parse("{\"hidden_size\":8}", &c) == PGRT_EINVAL);
    REQUIRE_CONTAINS(pgrt_last_message(), "config.json: model_type: missing");
    REQUIRE(cfg_parse("{\"model_type\":\"qwen2\",\"hidden_size\":8}", &c) == PGRT_EINVAL);
    REQUIRE_CONTAINS(pgrt_last_message(), "config.json: intermediate_size: missing");
    REQUIRE(cfg_parse("[]", &c) == PGRT_EINVAL);
    REQUIRE(cfg_parse("{", &c) == PGRT_EINVAL);
    REQUIRE_CONTAINS(pgrt_last_message(), "config.json: byte 1:");
    CFG_REFUSED("\"rope_scaling\":{\"type\":\"yarn\",\"factor\":4.0},", "rope_scaling: unsupported");
    CFG_REFUSED("\"rope_scaling\":4,", "rope_scaling: unsupported");
    CFG_REFUSED("\"use_sliding_window\":true,", "use_sliding_window: true is not supported");
    CFG_REFUSED("\"layer_types\":[\"full_attention\",\"sliding_attention\"],",
                "layer_types[1]: only full_attention");
    CFG_REFUSED("\"num_key_value_heads\":3,",
                "num_key_value_heads: 3 does not divide num_attention_heads 4");
    CFG_REFUSED("\"num_key_value_heads\":0,", "num_key_value_heads: out of range");
    CFG_REFUSED("\"head_dim\":15,", "head_dim: 15 is odd");
    CFG_REFUSED("\"hidden_act\":\"gelu\",", "hidden_act: 'gelu' is not supported");
    CFG_REFUSED("\"mlp_bias\":true,", "mlp_bias: true is not supported");
    CFG_REFUSED("\"pretraining_tp\":2,", "pretraining_tp: 2 is not supported");
    CFG_REFUSED("\"tie_word_embeddings\":1,", "tie_word_embeddings: expected true or false");
    CFG_REFUSED("\"rope_theta\":\"big\",", "rope_theta: expected a number");
    REQUIRE(cfg_parse("{\"model_type\":\"llama\",\"hidden_size\":\"64\"}", &c) == PGRT_EINVAL);
    REQUIRE_CONTAINS(pgrt_last_message(), "config.json: hidden_size: expected an integer");
    REQUIRE(cfg_parse("{\"model_type\":\"llama\",\"hidden_size\":66,\"intermediate_size\":8,"
                      "\"num_hidden_layers\":1,\"num_attention_heads\":4,\"vocab_size\":8,"
                      "\"rms_norm_eps\":1e-6}",
                      &c) == PGRT_EINVAL);
    REQUIRE_CONTAINS(pgrt_last_message(),
                     "num_attention_heads: 4 does not divide hidden_size 66 (and no head_dim)");
    REQUIRE(cfg_parse("{\"model_type\":\"llama\",\"hidden_size\":64,\"intermediate_size\":8,"
                      "\"num_hidden_layers\":1,\"num_attention_heads\":4,\"vocab_size\":8}",
                      &c) == PGRT_EINVAL);
    REQUIRE_CONTAINS(pgrt_last_message(), "rms_norm_eps: missing");
}

/* Llama-3.2-1B's config.json (transformers 4.45): Llama 3.x rope scaling,
 * head_dim given, tied head. */
static const char llama32_cfg[] =
    "{\n  \"architectures\": [\"LlamaForCausalLM\"],\n  \"attention_bias\": false,\n"
    "  \"attention_dropout\": 0.0,\n  \"bos_token_id\": 128000,\n  \"eos_token_id\": 128001,\n"
    "  \"head_dim\": 64,\n  \"hidden_act\": \"silu\",\n  \"hidden_size\": 2048,\n"
    "  \"initializer_range\": 0.02,\n  \"intermediate_size\": 8192,\n"
    "  \"max_position_embeddings\": 131072,\n  \"mlp_bias\": false,\n"
    "  \"model_type\": \"llama\",\n  \"num_attention_heads\": 32,\n"
    "  \"num_hidden_layers\": 16,\n  \"num_key_value_heads\": 8,\n  \"pretraining_tp\": 1,\n"
    "  \"rms_norm_eps\": 1e-05,\n  \"rope_scaling\": {\n    \"factor\": 32.0,\n"
    "    \"high_freq_factor\": 4.0,\n    \"low_freq_factor\": 1.0,\n"
    "    \"original_max_position_embeddings\": 8192,\n    \"rope_type\": \"llama3\"\n  },\n"
    "  \"rope_theta\": 500000.0,\n  \"tie_word_embeddings\": true,\n"
    "  \"torch_dtype\": \"bfloat16\",\n  \"transformers_version\": \"4.45.0.dev0\",\n"
    "  \"use_cache\": true,\n  \"vocab_size\": 128256\n}\n";

/* Mistral-7B-v0.3's: no sliding window (null), untied head. */
static const char mistral_cfg[] =
    "{\n  \"architectures\": [\"MistralForCausalLM\"],\n  \"attention_dropout\": 0.0,\n"
    "  \"bos_token_id\": 1,\n  \"eos_token_id\": 2,\n  \"hidden_act\": \"silu\",\n"
    "  \"hidden_size\": 4096,\n  \"initializer_range\": 0.02,\n  \"intermediate_size\": 14336,\n"
    "  \"max_position_embeddings\": 32768,\n  \"model_type\": \"mistral\",\n"
    "  \"num_attention_heads\": 32,\n  \"num_hidden_layers\": 32,\n"
    "  \"num_key_value_heads\": 8,\n  \"rms_norm_eps\": 1e-05,\n  \"rope_theta\": 1000000.0,\n"
    "  \"sliding_window\": null,\n  \"tie_word_embeddings\": false,\n"
    "  \"torch_dtype\": \"bfloat16\",\n  \"transformers_version\": \"4.42.0.dev0\",\n"
    "  \"use_cache\": true,\n  \"vocab_size\": 32768\n}\n";

/* Qwen3-0.6B's: q/k norms, head_dim 128 with heads x head_dim (2048) !=
 * hidden (1024), no biases, tied head. */
static const char qwen3_cfg[] =
    "{\n  \"architectures\": [\"Qwen3ForCausalLM\"],\n  \"attention_bias\": false,\n"
    "  \"attention_dropout\": 0.0,\n  \"bos_token_id\": 151643,\n  \"eos_token_id\": 151645,\n"
    "  \"head_dim\": 128,\n  \"hidden_act\": \"silu\",\n  \"hidden_size\": 1024,\n"
    "  \"initializer_range\": 0.02,\n  \"intermediate_size\": 3072,\n"
    "  \"max_position_embeddings\": 40960,\n  \"max_window_layers\": 28,\n"
    "  \"model_type\": \"qwen3\",\n  \"num_attention_heads\": 16,\n"
    "  \"num_hidden_layers\": 28,\n  \"num_key_value_heads\": 8,\n  \"rms_norm_eps\": 1e-06,\n"
    "  \"rope_scaling\": null,\n  \"rope_theta\": 1000000,\n  \"sliding_window\": null,\n"
    "  \"tie_word_embeddings\": true,\n  \"torch_dtype\": \"bfloat16\",\n"
    "  \"transformers_version\": \"4.51.0\",\n  \"use_cache\": true,\n"
    "  \"use_sliding_window\": false,\n  \"vocab_size\": 151936\n}\n";

#define LLAMA3_ROPE(what, f, lo, hi, orig)                                     \
    "\"" what "\":{\"rope_type\":\"llama3\",\"factor\":" f ",\"low_freq_factor\":" lo      \
    ",\"high_freq_factor\":" hi ",\"original_max_position_embeddings\":" orig "},"

static void test_config_llama3(void)
{
    pgrt_model_config c;
    REQUIRE_INT_EQ(cfg_parse(llama32_cfg, &c), 0);
    REQUIRE(c.arch == PGRT_ARCH_LLAMA && !c.qk_norm && !c.qkv_bias && !c.o_bias);
    REQUIRE(c.hidden == 2048 && c.intermediate == 8192 && c.layers == 16 && c.heads == 32);
    REQUIRE(c.kv_heads == 8 && c.head_dim == 64 && c.vocab == 128256 && c.tie_embeddings);
    REQUIRE(c.rms_norm_eps == 1e-5 && c.rope_theta == 5e5 && c.max_positions == 131072);
    REQUIRE_INT_EQ(c.rope.kind, PGRT_ROPE_LLAMA3);
    REQUIRE(c.rope.factor == 32 && c.rope.low_freq_factor == 1 && c.rope.high_freq_factor == 4);
    REQUIRE_INT_EQ(c.rope.original_max_positions, 8192);

    /* the default rope leaves the numbers 0; the older spelling "type";
     * transformers 5's rope_parameters, with rope_theta inside; both
     * spellings when they agree */
    REQUIRE_INT_EQ(cfg_with("\"rope_scaling\":{\"rope_type\":\"default\"},", &c), 0);
    REQUIRE(c.rope.kind == PGRT_ROPE_DEFAULT && c.rope.factor == 0 && c.max_positions == 2048);
    REQUIRE_INT_EQ(cfg_with("\"rope_scaling\":{\"type\":\"llama3\",\"factor\":8,"
                            "\"low_freq_factor\":1,\"high_freq_factor\":4,"
                            "\"original_max_position_embeddings\":8192},",
                            &c),
                   0);
    REQUIRE(c.rope.kind == PGRT_ROPE_LLAMA3 && c.rope.factor == 8);
    REQUIRE_INT_EQ(cfg_with("\"rope_parameters\":{\"rope_type\":\"llama3\",\"rope_theta\":5e5,"
                            "\"factor\":8.0,\"low_freq_factor\":1.0,\"high_freq_factor\":4.0,"
                            "\"original_max_position_embeddings\":8192.0},",
                            &c),
                   0);
    REQUIRE(c.rope.kind == PGRT_ROPE_LLAMA3 && c.rope_theta == 5e5);
    REQUIRE_INT_EQ(c.rope.original_max_positions, 8192);
    REQUIRE_INT_EQ(cfg_with(LLAMA3_ROPE("rope_scaling", "8", "1", "4", "8192")
                                LLAMA3_ROPE("rope_parameters", "8.0", "1.0", "4.0", "8192"),
                            &c),
                   0);
    REQUIRE(c.rope.kind == PGRT_ROPE_LLAMA3);
    REQUIRE_INT_EQ(cfg_with("\"partial_rotary_factor\":1.0,", &c), 0);

    /* other ropes, by name, with what is supported */
    CFG_REFUSED("\"rope_scaling\":{\"rope_type\":\"linear\",\"factor\":2.0},",
                "config.json: rope_scaling: unsupported rope type 'linear' (supported: default, "
                "llama3)");
    CFG_REFUSED("\"rope_scaling\":{\"type\":\"dynamic\",\"factor\":2.0},",
                "rope_scaling: unsupported rope type 'dynamic'");
    CFG_REFUSED("\"rope_parameters\":{\"rope_type\":\"yarn\",\"factor\":4.0,\"beta_fast\":32},",
                "rope_parameters: unsupported rope type 'yarn'");
    CFG_REFUSED("\"rope_scaling\":{\"rope_type\":\"longrope\",\"short_factor\":[1]},",
                "rope_scaling: unsupported rope type 'longrope'");
    CFG_REFUSED("\"rope_scaling\":{\"factor\":2.0},", "unsupported rope type '(none)'");
    /* llama3's settings: each missing, ill-typed or out of range */
    CFG_REFUSED("\"rope_scaling\":{\"rope_type\":\"llama3\"},",
                "config.json: rope_scaling.factor: missing (llama3 needs it)");
    CFG_REFUSED("\"rope_scaling\":{\"rope_type\":\"llama3\",\"factor\":8,\"low_freq_factor\":1,"
                "\"high_freq_factor\":4},",
                "rope_scaling.original_max_position_embeddings: missing");
    CFG_REFUSED(LLAMA3_ROPE("rope_scaling", "\"8\"", "1", "4", "8192"),
                "rope_scaling.factor: expected a number");
    CFG_REFUSED(LLAMA3_ROPE("rope_scaling", "0", "1", "4", "8192"),
                "rope_scaling.factor: 0 must be > 0");
    CFG_REFUSED(LLAMA3_ROPE("rope_scaling", "-8", "1", "4", "8192"),
                "rope_scaling.factor: -8 must be > 0");
    CFG_REFUSED(LLAMA3_ROPE("rope_parameters", "8", "0", "4", "8192"),
                "rope_parameters.low_freq_factor: 0 must be > 0");
    CFG_REFUSED(LLAMA3_ROPE("rope_scaling", "8", "4", "4", "8192"),
                "rope_scaling.high_freq_factor: 4 must be > low_freq_factor 4");
    CFG_REFUSED(LLAMA3_ROPE("rope_scaling", "8", "4", "1", "8192"),
                "rope_scaling.high_freq_factor: 1 must be > low_freq_factor 4");
    CFG_REFUSED(LLAMA3_ROPE("rope_scaling", "8", "1", "4", "0"),
                "rope_scaling.original_max_position_embeddings: 0 must be >= 1");
    CFG_REFUSED(LLAMA3_ROPE("rope_scaling", "8", "1", "4", "8192.5"),
                "rope_scaling.original_max_position_embeddings: 8192.5 is not an integer");
    CFG_REFUSED("\"rope_scaling\":{\"rope_type\":\"llama3\",\"factor\":8,\"low_freq_factor\":1,"
                "\"high_freq_factor\":4,\"original_max_position_embeddings\":8192,"
                "\"attention_factor\":1},",
                "rope_scaling: unsupported setting 'attention_factor' for the llama3 rope");
    CFG_REFUSED("\"rope_scaling\":{\"rope_type\":\"default\",\"factor\":8},",
                "rope_scaling: unsupported setting 'factor' for the default rope");
    /* the two spellings must agree */
    CFG_REFUSED(LLAMA3_ROPE("rope_scaling", "32", "1", "4", "8192")
                    LLAMA3_ROPE("rope_parameters", "8", "1", "4", "8192"),
                "config.json: rope_scaling and rope_parameters disagree");
    CFG_REFUSED(LLAMA3_ROPE("rope_scaling", "8", "1", "4", "8192")
                    "\"rope_parameters\":{\"rope_type\":\"default\"},",
                "rope_scaling and rope_parameters disagree");
    CFG_REFUSED("\"partial_rotary_factor\":0.5,", "partial_rotary_factor: 0.5 is not supported");
    CFG_REFUSED("\"rope_parameters\":{\"rope_type\":\"default\",\"partial_rotary_factor\":0.5},",
                "rope_parameters.partial_rotary_factor: only 1 is supported");
}

static void test_config_mistral(void)
{
    pgrt_model_config c;
    REQUIRE_INT_EQ(cfg_parse(mistral_cfg, &c), 0);
    REQUIRE(c.arch == PGRT_ARCH_MISTRAL && !c.qk_norm && !c.qkv_bias && !c.o_bias);
    REQUIRE(c.hidden == 4096 && c.intermediate == 14336 && c.layers == 32 && c.heads == 32);
    REQUIRE(c.kv_heads == 8 && c.head_dim == 128 && c.vocab == 32768 && !c.tie_embeddings);
    REQUIRE(c.rms_norm_eps == 1e-5 && c.rope_theta == 1e6 && c.max_positions == 32768);
    REQUIRE(c.rope.kind == PGRT_ROPE_DEFAULT);
    REQUIRE_STR_EQ(pgrt_arch_name(c.arch), "mistral");

    /* Mistral-Nemo's shape: head_dim 128 given, not hidden / heads = 160;
     * the projections follow head_dim */
    REQUIRE_INT_EQ(cfg_parse("{\"model_type\":\"mistral\",\"hidden_size\":5120,"
                             "\"intermediate_size\":14336,\"num_hidden_layers\":40,"
                             "\"num_attention_heads\":32,\"num_key_value_heads\":8,"
                             "\"head_dim\":128,\"vocab_size\":131072,\"rms_norm_eps\":1e-5,"
                             "\"max_position_embeddings\":1024000,\"sliding_window\":null,"
                             "\"rope_theta\":1000000.0}",
                             &c),
                   0);
    REQUIRE(c.head_dim == 128 && c.max_positions == 1024000);
    int in, out;
    pgrt_linear_dims(&c, PGRT_LINEAR_Q, &in, &out);
    REQUIRE(in == 5120 && out == 4096);
    pgrt_linear_dims(&c, PGRT_LINEAR_K, &in, &out);
    REQUIRE(in == 5120 && out == 1024);
    pgrt_linear_dims(&c, PGRT_LINEAR_O, &in, &out);
    REQUIRE(in == 4096 && out == 5120);

    /* transformers' MistralConfig defaults: 8 kv heads, a 4096 window and
     * 131072 positions; biases are never read */
    REQUIRE_INT_EQ(cfg_parse("{\"model_type\":\"mistral\",\"hidden_size\":256,"
                             "\"intermediate_size\":512,\"num_hidden_layers\":2,"
                             "\"num_attention_heads\":16,\"vocab_size\":256,"
                             "\"rms_norm_eps\":1e-5,\"sliding_window\":null,"
                             "\"attention_bias\":true,\"mlp_bias\":true,\"pretraining_tp\":2}",
                             &c),
                   0);
    REQUIRE(c.kv_heads == 8 && c.head_dim == 16 && c.max_positions == 131072);
    REQUIRE(!c.qkv_bias && !c.o_bias);
    REQUIRE_INT_EQ(cfg_mt("mistral", "\"sliding_window\":32768,\"max_position_embeddings\":32768,"
                                     "\"num_key_value_heads\":2,",
                          &c),
                   0);
    REQUIRE_INT_EQ(cfg_mt("mistral", "\"max_position_embeddings\":4096,\"num_key_value_heads\":2,",
                          &c),
                   0);

    /* a window the training length can exceed */
    CFG_MT_REFUSED("mistral", "\"sliding_window\":4096,\"max_position_embeddings\":32768,"
                              "\"num_key_value_heads\":2,",
                   "config.json: sliding_window: 4096 is below max_position_embeddings 32768: "
                   "windowed attention is not supported");
    CFG_MT_REFUSED("mistral", "\"num_key_value_heads\":2,",
                   "sliding_window: absent, which transformers takes as 4096, below "
                   "max_position_embeddings 131072: windowed attention is not supported");
    CFG_MT_REFUSED("mistral", "\"sliding_window\":0,\"num_key_value_heads\":2,",
                   "sliding_window: out of range");
    CFG_MT_REFUSED("mistral", "\"sliding_window\":\"4k\",\"num_key_value_heads\":2,",
                   "sliding_window: expected an integer");
    CFG_MT_REFUSED("mistral", "\"sliding_window\":null,",
                   "num_key_value_heads: 8 (absent: Mistral's default) does not divide "
                   "num_attention_heads 4");
    CFG_MT_REFUSED("mistral", "\"sliding_window\":null,\"num_key_value_heads\":2,"
                              "\"max_position_embeddings\":0,",
                   "max_position_embeddings: out of range");
    CFG_MT_REFUSED("mistral", "\"sliding_window\":null,\"num_key_value_heads\":2,"
                              "\"layer_types\":[\"sliding_attention\",\"full_attention\"],",
                   "layer_types[0]: only full_attention is supported");
}

static void test_config_qwen3(void)
{
    pgrt_model_config c;
    REQUIRE_INT_EQ(cfg_parse(qwen3_cfg, &c), 0);
    REQUIRE(c.arch == PGRT_ARCH_QWEN3 && c.qk_norm && !c.qkv_bias && !c.o_bias);
    REQUIRE(c.hidden == 1024 && c.intermediate == 3072 && c.layers == 28 && c.heads == 16);
    REQUIRE(c.kv_heads == 8 && c.head_dim == 128 && c.vocab == 151936 && c.tie_embeddings);
    REQUIRE(c.rms_norm_eps == 1e-6 && c.rope_theta == 1e6 && c.max_positions == 40960);
    REQUIRE(c.rope.kind == PGRT_ROPE_DEFAULT);
    int in, out;
    pgrt_linear_dims(&c, PGRT_LINEAR_Q, &in, &out);
    REQUIRE(in == 1024 && out == 2048);
    pgrt_linear_dims(&c, PGRT_LINEAR_O, &in, &out);
    REQUIRE(in == 2048 && out == 1024);

    /* head_dim absent: Qwen3Config's 128, not hidden / heads; biases on
     * all four projections with attention_bias; mlp_bias never read */
    REQUIRE_INT_EQ(cfg_mt("qwen3", "\"attention_bias\":true,\"mlp_bias\":true,", &c), 0);
    REQUIRE(c.head_dim == 128 && c.qkv_bias && c.o_bias && c.qk_norm);
    REQUIRE(c.max_positions == 32768 && c.kv_heads == 4);
    REQUIRE_INT_EQ(cfg_mt("qwen3", "\"head_dim\":32,\"sliding_window\":4096,"
                                   "\"layer_types\":[\"full_attention\",\"full_attention\"],",
                          &c),
                   0);
    REQUIRE(c.head_dim == 32 && !c.qkv_bias);
    CFG_MT_REFUSED("qwen3", "\"use_sliding_window\":true,",
                   "use_sliding_window: true is not supported");
    CFG_MT_REFUSED("qwen3", "\"layer_types\":[\"full_attention\",\"sliding_attention\"],",
                   "layer_types[1]: only full_attention is supported");
    CFG_MT_REFUSED("qwen3", "\"attention_bias\":1,", "attention_bias: expected true or false");
    CFG_MT_REFUSED("qwen3", "\"head_dim\":127,", "head_dim: 127 is odd");
    REQUIRE_STR_EQ(pgrt_arch_name(PGRT_ARCH_QWEN3), "qwen3");
    REQUIRE_STR_EQ(pgrt_arch_name(PGRT_ARCH_QWEN2), "qwen2");
    REQUIRE_STR_EQ(pgrt_arch_name(PGRT_ARCH_LLAMA), "llama");
    REQUIRE_STR_EQ(pgrt_arch_name((pgrt_arch)99), "?");
}

/* transformers' llama3 rescaling in double, from the same f32 table */
static double llama3_ref(double x, const pgrt_rope_scaling *r)
{
    double old = (double)r->original_max_positions;
    double w = 2 * 0x1.921fb54442d18p+1 / x; /* 2 * math.pi */
    if (w < old / r->high_freq_factor)
        return x;
    if (w > old / r->low_freq_factor)
        return x / r->factor;
    double s = (old / w - r->low_freq_factor) / (r->high_freq_factor - r->low_freq_factor);
    return (1 - s) * x / r->factor + s * x;
}

/* How far the f32 result may be from llama3_ref, relative, u = 2^-24 a
 * rounding. Unchanged entries are exact and divided ones one rounding
 * (0 here when the factor is a power of two). In the smoothed band:
 * wavelen is 3 roundings off (1/x, F(2 pi), the product), old / wavelen 5
 * (2 more), a value at most high; minus low and over (high - low) gives
 * smooth within ds = u (5 high / span + 2), span = high - low. smoothed =
 * x ((1 - s) / f + s) moves by x |1 - 1/f| ds with s, and takes 4 more
 * roundings of at most x max(1, 1/f) u each, then its own: relative to
 * smoothed >= x min(1, 1/f), that is the bound below. Entries near a band
 * edge that f32 and f64 classify differently stay inside it: smoothed
 * meets x / f at smooth 0 and x at smooth 1. For Llama 3.2 (f 32, low 1,
 * high 4) it is 398 u = 2.4e-5; observed: under 3 u. */
static double llama3_tol(const pgrt_rope_scaling *r)
{
    double u = 0x1p-24, f = r->factor;
    double ds = u * (5 * r->high_freq_factor / (r->high_freq_factor - r->low_freq_factor) + 2);
    return (fabs(1 - 1 / f) * ds + 4 * u * fmax(1, 1 / f)) / fmin(1, 1 / f) + u;
}

static void rope_table(float *t, int n, double theta)
{
    for (int i = 0; i < n; i++)
        t[i] = (float)(1.0 / pow(theta, 2.0 * i / (2.0 * n)));
}

/* Every entry of a llama3 table against llama3_ref: unchanged above the
 * high-frequency wavelength, x / factor (one rounding) below the low one,
 * within llama3_tol between; returns the count in each band. */
static void check_llama3_table(const pgrt_model_config *c, const float *in, const float *out, int n,
                               int bands[3])
{
    const pgrt_rope_scaling *r = &c->rope;
    double tol = llama3_tol(r), old = (double)r->original_max_positions;
    for (int i = 0; i < n; i++) {
        double w = 2 * 0x1.921fb54442d18p+1 / in[i], want = llama3_ref(in[i], r);
        if (w < old / r->high_freq_factor) {
            bands[0]++;
            REQUIRE(out[i] == in[i]);
        } else if (w > old / r->low_freq_factor) {
            bands[2]++;
            REQUIRE(out[i] == (float)((double)in[i] / (float)r->factor));
        } else {
            bands[1]++;
            double e = fabs(out[i] - want) / want;
            if (!(e <= tol))
                fprintf(stderr, "entry %d: %a, want %a: relative %g > %g\n", i, out[i], want, e,
                        tol);
            REQUIRE(e <= tol);
        }
    }
}

static void test_rope_scale(void)
{
    /* the default rope: nothing changes */
    pgrt_model_config c;
    REQUIRE_INT_EQ(cfg_parse(qwen3_cfg, &c), 0);
    float t[64], u[64];
    rope_table(t, 64, c.rope_theta);
    memcpy(u, t, sizeof t);
    REQUIRE_INT_EQ(pgrt_model_rope_scale(&c, u, 64), 0);
    REQUIRE(!memcmp(t, u, sizeof t));
    REQUIRE_INT_EQ(pgrt_model_rope_scale(&c, NULL, 0), 0);
    REQUIRE_INT_EQ(pgrt_model_rope_scale(NULL, u, 64), PGRT_EINVAL);
    REQUIRE_INT_EQ(pgrt_model_rope_scale(&c, NULL, 4), PGRT_EINVAL);
    REQUIRE_INT_EQ(pgrt_model_rope_scale(&c, u, -1), PGRT_EINVAL);
    REQUIRE_CONTAINS(pgrt_last_message(), "pgrt_model_rope_scale: n is -1");

    /* Llama 3.2-1B: head_dim 64, theta 5e5; wavelengths below 2048 stay,
     * above 8192 are divided by 32, entries 15 to 17 are smoothed */
    REQUIRE_INT_EQ(cfg_parse(llama32_cfg, &c), 0);
    rope_table(t, 32, c.rope_theta);
    memcpy(u, t, sizeof t);
    REQUIRE_INT_EQ(pgrt_model_rope_scale(&c, u, 32), 0);
    int bands[3] = {0};
    check_llama3_table(&c, t, u, 32, bands);
    REQUIRE(bands[0] == 15 && bands[1] == 3 && bands[2] == 14);

    /* The same entries, bit for bit, from the f32 op sequence config.c
     * names (reciprocal-then-multiply for scalar / tensor, a true f32
     * division for tensor / scalar, each op rounded once), worked out by
     * hand in exact arithmetic and rounded to nearest-even at each step
     * (an f64 op on f32 operands rounded to f32 is that: 53 >= 2 x 24 + 2).
     * Not yet compared with torch itself: the lead's check with
     * reference.py on a machine with torch confirms them. In[] holds
     * F(1 / 500000^(i/32)) for i = 14 to 18 (the table above). Where
     * another reading of the ops gives another float, it is named: 16's
     * and 17's f64 result rounded once is 0x1.c26c46p-12 and 0x1.9731f0p-14;
     * with 2 pi / x and old / wavelen as true divisions 16 is
     * 0x1.c26c48p-12; with smooth x fused into the last add, 0x1.c26c40p-12;
     * with torch-on-CUDA's scalar division (times the f32 reciprocal) 15
     * is 0x1.524f38p-10. */
    static const float in32[5] = {0x1.a4ee4p-9f, 0x1.175482p-9f, 0x1.72ba44p-10f,
                                  0x1.ec07d4p-11f, 0x1.46831ap-11f};
    static const float want32[5] = {0x1.a4ee4p-9f, 0x1.524f36p-10f, 0x1.c26c42p-12f,
                                    0x1.9731eep-14f, 0x1.46831ap-16f};
    for (int i = 0; i < 5; i++)
        REQUIRE(t[14 + i] == in32[i]);
    memcpy(u, in32, sizeof in32);
    REQUIRE_INT_EQ(pgrt_model_rope_scale(&c, u, 5), 0);
    for (int i = 0; i < 5; i++) {
        if (u[i] != want32[i])
            fprintf(stderr, "llama 3.2 entry %d: %a, want %a\n", 14 + i, u[i], want32[i]);
        REQUIRE(u[i] == want32[i]);
    }

    /* Llama 3.1-8B's factor 8 at head_dim 128: entries 30 and 32 (the same
     * inputs as 3.2's 15 and 16); 32's f64 result rounded once is
     * 0x1.132ba8p-11, CUDA's division gives 30 0x1.67a23cp-10 */
    REQUIRE_INT_EQ(cfg_with(LLAMA3_ROPE("rope_scaling", "8.0", "1.0", "4.0", "8192")
                                "\"rope_theta\":500000.0,\"head_dim\":128,",
                            &c),
                   0);
    float in8[2] = {0x1.175482p-9f, 0x1.72ba44p-10f};
    REQUIRE_INT_EQ(pgrt_model_rope_scale(&c, in8, 2), 0);
    REQUIRE(in8[0] == 0x1.67a23ap-10f && in8[1] == 0x1.132ba6p-11f);
    rope_table(t, 64, c.rope_theta);
    memcpy(u, t, sizeof t);
    REQUIRE_INT_EQ(pgrt_model_rope_scale(&c, u, 64), 0);
    memset(bands, 0, sizeof bands);
    check_llama3_table(&c, t, u, 64, bands);
    REQUIRE(bands[0] == 29 && bands[1] == 6 && bands[2] == 29);

    /* reference.py's --arch llama3 model: head_dim 16, theta 1e4, factor
     * 4, original 64: entry 0 stays, 1 and 2 are smoothed (2's f64
     * result rounded once is 0x1.a13714p-6), 3 to 7 divided */
    REQUIRE_INT_EQ(cfg_with(LLAMA3_ROPE("rope_scaling", "4.0", "1.0", "4.0", "64"), &c), 0);
    rope_table(t, 8, c.rope_theta);
    memcpy(u, t, 8 * sizeof *t);
    REQUIRE_INT_EQ(pgrt_model_rope_scale(&c, u, 8), 0);
    REQUIRE(t[1] == 0x1.43d136p-2f && t[2] == 0x1.99999ap-4f);
    REQUIRE(u[0] == 1.0f && u[1] == 0x1.04c26cp-2f && u[2] == 0x1.a13712p-6f);
    memset(bands, 0, sizeof bands);
    check_llama3_table(&c, t, u, 8, bands);
    REQUIRE(bands[0] == 1 && bands[1] == 2 && bands[2] == 5);

    /* factors that are not powers of two, a threshold that is not an f32 */
    REQUIRE_INT_EQ(cfg_with(LLAMA3_ROPE("rope_scaling", "6.5", "1.5", "3.7", "1000"), &c), 0);
    rope_table(t, 64, 10000.0);
    memcpy(u, t, sizeof t);
    REQUIRE_INT_EQ(pgrt_model_rope_scale(&c, u, 64), 0);
    memset(bands, 0, sizeof bands);
    check_llama3_table(&c, t, u, 64, bands);
    REQUIRE(bands[0] > 0 && bands[1] > 0 && bands[2] > 0);
}

static pgrt_model_config small_qwen(void)
{
    pgrt_model_config c;
    cfg_parse("{\"model_type\":\"qwen2\",\"hidden_size\":64,\"intermediate_size\":128,"
              "\"num_hidden_layers\":2,\"num_attention_heads\":4,\"num_key_value_heads\":2,"
              "\"vocab_size\":256,\"rms_norm_eps\":1e-6,\"tie_word_embeddings\":true}",
              &c);
    return c;
}

static void test_specs(void)
{
    pgrt_model_config c = small_qwen();
    pgrt_weight_spec *s = NULL;
    size_t n = 0;
    REQUIRE_INT_EQ(pgrt_model_weight_specs(&c, &s, &n), 0);
    REQUIRE_INT_EQ(n, 1 + 2 * (2 + 7 + 3) + 1);
    REQUIRE_STR_EQ(s[0].name, "model.embed_tokens.weight");
    REQUIRE(s[0].shape[0] == 256 && s[0].shape[1] == 64);
    REQUIRE_STR_EQ(s[1].name, "model.layers.0.input_layernorm.weight");
    REQUIRE_STR_EQ(s[2].name, "model.layers.0.self_attn.q_proj.weight");
    REQUIRE(s[2].shape[0] == 64 && s[2].shape[1] == 64);
    REQUIRE_STR_EQ(s[3].name, "model.layers.0.self_attn.q_proj.bias");
    REQUIRE_STR_EQ(s[4].name, "model.layers.0.self_attn.k_proj.weight");
    REQUIRE(s[4].shape[0] == 32 && s[4].shape[1] == 64 && s[4].layer == 0);
    REQUIRE_STR_EQ(s[8].name, "model.layers.0.self_attn.o_proj.weight");
    REQUIRE_STR_EQ(s[9].name, "model.layers.0.post_attention_layernorm.weight");
    REQUIRE_STR_EQ(s[12].name, "model.layers.0.mlp.down_proj.weight");
    REQUIRE(s[12].shape[0] == 64 && s[12].shape[1] == 128);
    REQUIRE_STR_EQ(s[n - 1].name, "model.norm.weight");
    free(s);
    c.tie_embeddings = false;
    c.arch = PGRT_ARCH_LLAMA;
    c.qkv_bias = c.o_bias = true;
    REQUIRE_INT_EQ(pgrt_model_weight_specs(&c, &s, &n), 0);
    REQUIRE_INT_EQ(n, 1 + 2 * (2 + 7 + 4) + 2);
    REQUIRE_STR_EQ(s[n - 1].name, "lm_head.weight");
    REQUIRE_STR_EQ(s[9].name, "model.layers.0.self_attn.o_proj.bias");
    REQUIRE_STR_EQ(s[10].name, "model.layers.0.post_attention_layernorm.weight");
    free(s);
    int in, out;
    pgrt_linear_dims(&c, PGRT_LINEAR_GATE, &in, &out);
    REQUIRE(in == 64 && out == 128);
    REQUIRE_STR_EQ(pgrt_linear_name(PGRT_LINEAR_DOWN), "down_proj");

    /* Qwen3: q_norm and k_norm [head_dim] after o_proj, no bias; head_dim
     * 32 with hidden 64 and 4 heads (q is 128 wide) */
    REQUIRE_INT_EQ(cfg_mt("qwen3", "\"head_dim\":32,\"num_key_value_heads\":2,", &c), 0);
    REQUIRE_INT_EQ(pgrt_model_weight_specs(&c, &s, &n), 0);
    REQUIRE_INT_EQ(n, 1 + 2 * (2 + 7 + 2) + 2);
    REQUIRE_STR_EQ(s[1].name, "model.layers.0.input_layernorm.weight");
    REQUIRE_STR_EQ(s[2].name, "model.layers.0.self_attn.q_proj.weight");
    REQUIRE(s[2].shape[0] == 128 && s[2].shape[1] == 64);
    REQUIRE_STR_EQ(s[3].name, "model.layers.0.self_attn.k_proj.weight");
    REQUIRE(s[3].shape[0] == 64 && s[3].shape[1] == 64);
    REQUIRE_STR_EQ(s[5].name, "model.layers.0.self_attn.o_proj.weight");
    REQUIRE(s[5].shape[0] == 64 && s[5].shape[1] == 128);
    REQUIRE_STR_EQ(s[6].name, "model.layers.0.self_attn.q_norm.weight");
    REQUIRE(s[6].ndim == 1 && s[6].shape[0] == 32 && s[6].layer == 0);
    REQUIRE_STR_EQ(s[7].name, "model.layers.0.self_attn.k_norm.weight");
    REQUIRE(s[7].ndim == 1 && s[7].shape[0] == 32);
    REQUIRE_STR_EQ(s[8].name, "model.layers.0.post_attention_layernorm.weight");
    REQUIRE_STR_EQ(s[17].name, "model.layers.1.self_attn.q_norm.weight");
    REQUIRE(s[17].layer == 1);
    for (size_t i = 0; i < n; i++)
        REQUIRE(!strstr(s[i].name, ".bias"));
    free(s);
    /* with attention_bias: four biases, the norms after o's */
    REQUIRE_INT_EQ(cfg_mt("qwen3", "\"head_dim\":32,\"attention_bias\":true,", &c), 0);
    REQUIRE_INT_EQ(pgrt_model_weight_specs(&c, &s, &n), 0);
    REQUIRE_INT_EQ(n, 1 + 2 * (2 + 7 + 4 + 2) + 2);
    REQUIRE_STR_EQ(s[3].name, "model.layers.0.self_attn.q_proj.bias");
    REQUIRE(s[3].shape[0] == 128);
    REQUIRE_STR_EQ(s[9].name, "model.layers.0.self_attn.o_proj.bias");
    REQUIRE_STR_EQ(s[10].name, "model.layers.0.self_attn.q_norm.weight");
    REQUIRE_STR_EQ(s[11].name, "model.layers.0.self_attn.k_norm.weight");
    REQUIRE_STR_EQ(s[12].name, "model.layers.0.post_attention_layernorm.weight");
    free(s);
    /* Mistral: no bias, no q/k norm, an untied head */
    REQUIRE_INT_EQ(cfg_mt("mistral", "\"num_key_value_heads\":2,\"sliding_window\":null,", &c),
                   0);
    REQUIRE_INT_EQ(pgrt_model_weight_specs(&c, &s, &n), 0);
    REQUIRE_INT_EQ(n, 1 + 2 * (2 + 7) + 2);
    for (size_t i = 0; i < n; i++)
        REQUIRE(!strstr(s[i].name, ".bias") && !strstr(s[i].name, "_norm."));
    REQUIRE_STR_EQ(s[n - 1].name, "lm_head.weight");
    free(s);
}

static const char small_cfg[] =
    "{\"model_type\":\"qwen2\",\"hidden_size\":64,\"intermediate_size\":128,"
    "\"num_hidden_layers\":2,\"num_attention_heads\":4,\"num_key_value_heads\":2,"
    "\"vocab_size\":256,\"rms_norm_eps\":1e-6,\"tie_word_embeddings\":true}";

/* Write the small model's weights into dir: all specs (bf16) with the
 * change the test asks for. */
enum { ALL, DROP, BAD_SHAPE, BAD_DTYPE, EXTRA, SHARDED };
static int write_model_cfg(const char *dir, const char *cfg, int what, const char *victim)
{
    pgrt_model_config c;
    pgrt_weight_spec *s;
    size_t n;
    if (cfg_parse(cfg, &c) || pgrt_model_weight_specs(&c, &s, &n))
        return -1;
    pgrt_st_out *t = calloc(n + 1, sizeof *t);
    static uint8_t zeros[256 * 128 * 4];
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        if (what == DROP && !strcmp(s[i].name, victim))
            continue;
        pgrt_st_out *o = &t[k++];
        o->name = s[i].name;
        o->dtype = PGRT_ST_BF16;
        o->ndim = s[i].ndim;
        o->shape[0] = s[i].shape[0];
        o->shape[1] = s[i].shape[1];
        o->data = zeros;
        if (!strcmp(s[i].name, victim)) {
            if (what == BAD_SHAPE)
                o->shape[0]++;
            if (what == BAD_DTYPE)
                o->dtype = PGRT_ST_I32;
        }
    }
    if (what == EXTRA)
        t[k++] = (pgrt_st_out){.name = victim, .dtype = PGRT_ST_BF16, .ndim = 1, .shape = {64},
                               .data = zeros};
    char p[4096];
    int rc;
    write_text(dir, "config.json", cfg);
    if (what == SHARDED) {
        size_t half = k / 2;
        path_in(p, sizeof p, dir, "model-00001-of-00002.safetensors");
        rc = pgrt_st_write(p, t, half, NULL, NULL, 0);
        path_in(p, sizeof p, dir, "model-00002-of-00002.safetensors");
        rc = rc ? rc : pgrt_st_write(p, t + half, k - half, NULL, NULL, 0);
        char idx[16384];
        size_t at = (size_t)snprintf(idx, sizeof idx, "{\"weight_map\":{");
        for (size_t i = 0; i < k; i++)
            at += (size_t)snprintf(idx + at, sizeof idx - at, "%s\"%s\":\"model-0000%d-of-00002."
                                   "safetensors\"", i ? "," : "", t[i].name, i < half ? 1 : 2);
        snprintf(idx + at, sizeof idx - at, "}}");
        write_text(dir, "model.safetensors.index.json", idx);
    } else {
        path_in(p, sizeof p, dir, "model.safetensors");
        rc = pgrt_st_write(p, t, k, NULL, NULL, 0);
    }
    free(t);
    free(s);
    return rc;
}

static int write_model(const char *dir, int what, const char *victim)
{
    return write_model_cfg(dir, small_cfg, what, victim);
}

#define MODEL_REFUSED(what, victim, want)                                      \
    do {                                                                       \
        char d_[4096];                                                         \
        pgrt_model_files *m_ = NULL;                                           \
        REQUIRE(scratch_dir(d_, sizeof d_) != NULL);                           \
        REQUIRE_INT_EQ(write_model(d_, (what), (victim)), 0);                  \
        REQUIRE_INT_EQ(pgrt_model_open(d_, &m_), PGRT_EINVAL);                 \
        REQUIRE(m_ == NULL);                                                   \
        REQUIRE_CONTAINS(pgrt_last_message(), (want));                         \
        remove_tree(d_);                                                       \
    } while (0)

static void test_model_dir(void)
{
    char dir[4096];
    pgrt_model_files *m = NULL;
    REQUIRE(scratch_dir(dir, sizeof dir) != NULL);
    REQUIRE_INT_EQ(write_model(dir, ALL, ""), 0);
    REQUIRE_INT_EQ(pgrt_model_open(dir, &m), 0);
    REQUIRE(m && pgrt_model_files_config(m)->kv_heads == 2);
    const pgrt_st_tensor *t = pgrt_model_tensor(m, "model.layers.1.mlp.up_proj.weight");
    REQUIRE(t && t->dtype == PGRT_ST_BF16 && t->shape[0] == 128);
    /* the files read, for a caller that must not write over them */
    char want[4200];
    REQUIRE_INT_EQ(pgrt_model_file_count(m), 2);
    snprintf(want, sizeof want, "%s/config.json", dir);
    REQUIRE_STR_EQ(pgrt_model_file_path(m, 0), want);
    snprintf(want, sizeof want, "%s/model.safetensors", dir);
    REQUIRE_STR_EQ(pgrt_model_file_path(m, 1), want);
    REQUIRE(pgrt_model_file_path(m, 2) == NULL);
    pgrt_model_close(&m);
    remove_tree(dir);
    REQUIRE(scratch_dir(dir, sizeof dir) != NULL);
    REQUIRE_INT_EQ(write_model(dir, SHARDED, ""), 0);
    REQUIRE_INT_EQ(pgrt_model_open(dir, &m), 0);
    REQUIRE(pgrt_model_tensor(m, "model.norm.weight") != NULL);
    REQUIRE(pgrt_model_tensor(m, "model.embed_tokens.weight") != NULL);
    REQUIRE_INT_EQ(pgrt_model_file_count(m), 4);
    snprintf(want, sizeof want, "%s/model.safetensors.index.json", dir);
    REQUIRE_STR_EQ(pgrt_model_file_path(m, 1), want);
    snprintf(want, sizeof want, "%s/model-00002-of-00002.safetensors", dir);
    REQUIRE_STR_EQ(pgrt_model_file_path(m, 3), want);
    pgrt_model_close(&m);
    remove_tree(dir);
    /* a tied model may carry its head anyway, and old checkpoints a rope buffer */
    REQUIRE(scratch_dir(dir, sizeof dir) != NULL);
    REQUIRE_INT_EQ(write_model(dir, EXTRA, "model.layers.0.self_attn.rotary_emb.inv_freq"), 0);
    REQUIRE_INT_EQ(pgrt_model_open(dir, &m), 0);
    pgrt_model_close(&m);
    remove_tree(dir);

    /* Qwen3 and Mistral directories: the norms checked like any weight,
     * and refused where the model has none */
    static const char qwen3_small[] =
        "{\"model_type\":\"qwen3\",\"hidden_size\":64,\"intermediate_size\":128,"
        "\"num_hidden_layers\":2,\"num_attention_heads\":4,\"num_key_value_heads\":2,"
        "\"head_dim\":32,\"vocab_size\":256,\"rms_norm_eps\":1e-6,\"tie_word_embeddings\":true}";
    static const char mistral_small[] =
        "{\"model_type\":\"mistral\",\"hidden_size\":64,\"intermediate_size\":128,"
        "\"num_hidden_layers\":2,\"num_attention_heads\":4,\"num_key_value_heads\":2,"
        "\"vocab_size\":256,\"rms_norm_eps\":1e-6,\"sliding_window\":null}";
    REQUIRE(scratch_dir(dir, sizeof dir) != NULL);
    REQUIRE_INT_EQ(write_model_cfg(dir, qwen3_small, ALL, ""), 0);
    REQUIRE_INT_EQ(pgrt_model_open(dir, &m), 0);
    t = pgrt_model_tensor(m, "model.layers.1.self_attn.k_norm.weight");
    REQUIRE(t && t->ndim == 1 && t->shape[0] == 32);
    REQUIRE(m && pgrt_model_files_config(m)->qk_norm);
    pgrt_model_close(&m);
    REQUIRE_INT_EQ(
        write_model_cfg(dir, qwen3_small, DROP, "model.layers.1.self_attn.q_norm.weight"), 0);
    REQUIRE_INT_EQ(pgrt_model_open(dir, &m), PGRT_EINVAL);
    REQUIRE_CONTAINS(pgrt_last_message(),
                     "tensor 'model.layers.1.self_attn.q_norm.weight' missing");
    REQUIRE_INT_EQ(
        write_model_cfg(dir, qwen3_small, BAD_SHAPE, "model.layers.0.self_attn.k_norm.weight"), 0);
    REQUIRE_INT_EQ(pgrt_model_open(dir, &m), PGRT_EINVAL);
    REQUIRE_CONTAINS(pgrt_last_message(),
                     "tensor 'model.layers.0.self_attn.k_norm.weight': shape [33], expected [32]");
    REQUIRE_INT_EQ(write_model_cfg(dir, qwen3_small, EXTRA, "model.layers.0.self_attn.q_proj.bias"),
                   0);
    REQUIRE_INT_EQ(pgrt_model_open(dir, &m), PGRT_EINVAL);
    REQUIRE_CONTAINS(pgrt_last_message(), "tensor 'model.layers.0.self_attn.q_proj.bias' is not "
                                          "used by a qwen3 model with this config");
    REQUIRE_INT_EQ(write_model_cfg(dir, mistral_small, ALL, ""), 0);
    REQUIRE_INT_EQ(pgrt_model_open(dir, &m), 0);
    REQUIRE(m && pgrt_model_files_config(m)->arch == PGRT_ARCH_MISTRAL);
    pgrt_model_close(&m);
    REQUIRE_INT_EQ(
        write_model_cfg(dir, mistral_small, EXTRA, "model.layers.0.self_attn.q_norm.weight"), 0);
    REQUIRE_INT_EQ(pgrt_model_open(dir, &m), PGRT_EINVAL);
    REQUIRE_CONTAINS(pgrt_last_message(), "tensor 'model.layers.0.self_attn.q_norm.weight' is not "
                                          "used by a mistral model with this config");
    remove_tree(dir);

    MODEL_REFUSED(DROP, "model.layers.1.self_attn.v_proj.bias",
                  "tensor 'model.layers.1.self_attn.v_proj.bias' missing");
    MODEL_REFUSED(BAD_SHAPE, "model.layers.0.mlp.gate_proj.weight",
                  "tensor 'model.layers.0.mlp.gate_proj.weight': shape [129, 64], expected "
                  "[128, 64]");
    MODEL_REFUSED(BAD_DTYPE, "model.norm.weight",
                  "tensor 'model.norm.weight': dtype I32 is not supported (BF16, F16, F32)");
    MODEL_REFUSED(EXTRA, "model.layers.0.self_attn.o_proj.bias",
                  "tensor 'model.layers.0.self_attn.o_proj.bias' is not used by a qwen2 model");
    MODEL_REFUSED(EXTRA, "lm_head.weight",
                  "tensor 'lm_head.weight': shape [64], expected [256, 64]");
    REQUIRE(scratch_dir(dir, sizeof dir) != NULL);
    REQUIRE_INT_EQ(pgrt_model_open(dir, &m), PGRT_EINVAL);
    REQUIRE_CONTAINS(pgrt_last_message(), "config.json: No such file");
    write_text(dir, "config.json", "{\"model_type\":\"gpt2\"}");
    REQUIRE_INT_EQ(pgrt_model_open(dir, &m), PGRT_EINVAL);
    REQUIRE_CONTAINS(pgrt_last_message(), "model_type: 'gpt2'");
    remove_tree(dir);
}

static int acfg(const char *s, pgrt_adapter_config *c)
{
    return pgrt_adapter_config_parse(s, strlen(s), c);
}

#define ADAPTER_REFUSED(extra, want)                                           \
    do {                                                                       \
        pgrt_adapter_config c_;                                                \
        char buf_[1024];                                                         \
        snprintf(buf_, sizeof buf_, "{%s\"r\":8,\"target_modules\":[\"q_proj\"]}", (extra)); \
        REQUIRE(acfg(buf_, &c_) < 0);                                            \
        REQUIRE_CONTAINS(pgrt_last_message(), (want));                         \
    } while (0)

static void test_adapter_config(void)
{
    pgrt_adapter_config c;
    /* as PEFT 0.13 writes it */
    REQUIRE_INT_EQ(acfg("{\"alpha_pattern\": {}, \"auto_mapping\": null, "
                        "\"base_model_name_or_path\": \"Qwen/Qwen2.5-0.5B\", \"bias\": \"none\", "
                        "\"fan_in_fan_out\": false, \"inference_mode\": true, "
                        "\"init_lora_weights\": true, \"layer_replication\": null, "
                        "\"layers_pattern\": null, \"layers_to_transform\": null, "
                        "\"loftq_config\": {}, \"lora_alpha\": 16, \"lora_dropout\": 0.0, "
                        "\"megatron_config\": null, \"megatron_core\": \"megatron.core\", "
                        "\"modules_to_save\": null, \"peft_type\": \"LORA\", \"r\": 8, "
                        "\"rank_pattern\": {}, \"revision\": null, \"target_modules\": "
                        "[\"v_proj\", \"q_proj\", \"down_proj\"], \"task_type\": \"CAUSAL_LM\", "
                        "\"use_dora\": false, \"use_rslora\": false}",
                        &c),
                   0);
    REQUIRE_INT_EQ(c.r, 8);
    REQUIRE(c.alpha == 16);
    REQUIRE_INT_EQ(c.targets, (1u << PGRT_LINEAR_Q) | (1u << PGRT_LINEAR_V) |
                                  (1u << PGRT_LINEAR_DOWN));
    REQUIRE_STR_EQ(c.base_model, "Qwen/Qwen2.5-0.5B");
    REQUIRE_INT_EQ(acfg("{\"r\":4,\"target_modules\":\"all-linear\"}", &c), 0);
    REQUIRE_INT_EQ(c.targets, 0x7f);
    REQUIRE(c.alpha == 8);
    REQUIRE_INT_EQ(acfg("{\"r\":4,\"target_modules\":\"up_proj\"}", &c), 0);
    REQUIRE_INT_EQ(c.targets, 1u << PGRT_LINEAR_UP);

    ADAPTER_REFUSED("\"lora_dropout\":1,", "lora_dropout: 1 must be in [0, 1)");
    ADAPTER_REFUSED("\"lora_dropout\":-0.1,", "lora_dropout: -0.1 must be in [0, 1)");
    REQUIRE_INT_EQ(acfg("{\"r\":8,\"lora_dropout\":0.05,\"target_modules\":\"q_proj\"}", &c), 0);
    REQUIRE(c.dropout == 0.05);
    ADAPTER_REFUSED("\"bias\":\"all\",", "bias: 'all' is not supported (none)");
    ADAPTER_REFUSED("\"peft_type\":\"IA3\",", "peft_type: 'IA3' is not supported");
    ADAPTER_REFUSED("\"use_dora\":true,", "use_dora: true is not supported");
    ADAPTER_REFUSED("\"fan_in_fan_out\":true,", "fan_in_fan_out: true is not supported");
    ADAPTER_REFUSED("\"modules_to_save\":[\"lm_head\"],", "modules_to_save: not supported");
    ADAPTER_REFUSED("\"layers_to_transform\":[0],", "layers_to_transform: not supported");
    /* rank_pattern, alpha_pattern: malformed entries are refused naming
     * the map and the key (test_adapter_patterns has what they mean) */
    ADAPTER_REFUSED("\"rank_pattern\":{\"q_proj\":0},",
                    "rank_pattern: 'q_proj': not a rank (an integer from 1 to 65536)");
    ADAPTER_REFUSED("\"rank_pattern\":{\"k_proj\":8.5},", "rank_pattern: 'k_proj': not a rank");
    ADAPTER_REFUSED("\"rank_pattern\":{\"k_proj\":8.0},", "rank_pattern: 'k_proj': not a rank");
    ADAPTER_REFUSED("\"rank_pattern\":{\"v_proj\":\"8\"},", "rank_pattern: 'v_proj': not a rank");
    ADAPTER_REFUSED("\"rank_pattern\":{\"v_proj\":70000},", "rank_pattern: 'v_proj': not a rank");
    ADAPTER_REFUSED("\"alpha_pattern\":{\"o_proj\":-1},",
                    "alpha_pattern: 'o_proj': -1 is not a lora_alpha (a finite number > 0)");
    ADAPTER_REFUSED("\"alpha_pattern\":{\"o_proj\":0},", "alpha_pattern: 'o_proj': 0 is not");
    ADAPTER_REFUSED("\"alpha_pattern\":{\"up_proj\":true},",
                    "alpha_pattern: 'up_proj': not a number");
    ADAPTER_REFUSED("\"rank_pattern\":{\"(q_proj\":4},",
                    "rank_pattern: '(q_proj' is not a regular expression this reader takes");
    ADAPTER_REFUSED("\"alpha_pattern\":{\"(?=q)q_proj\":4},",
                    "alpha_pattern: '(?=q)q_proj' is not a regular expression");
    ADAPTER_REFUSED("\"rank_pattern\":[4],", "rank_pattern: not an object");
    ADAPTER_REFUSED("\"alpha_pattern\":\"q_proj\",", "alpha_pattern: not an object");
    ADAPTER_REFUSED("\"rank_pattern\":{\"q_proj\":4,\"q_proj\":8},", "duplicate key");
    {
        char big[600];
        snprintf(big, sizeof big, "\"rank_pattern\":{\"%0200d\":4},", 0);
        ADAPTER_REFUSED(big, "rank_pattern: key '000000000000000000000000000000000000000000000000"
                             "...' is longer than 159 bytes");
    }
    REQUIRE_INT_EQ(acfg("{\"r\":8,\"target_modules\":\"q_proj\",\"rank_pattern\":[],"
                        "\"alpha_pattern\":null}", &c), 0);
    REQUIRE(c.n_rank_pattern == 0 && c.n_alpha_pattern == 0);
    ADAPTER_REFUSED("\"lora_alpha\":0,", "lora_alpha: 0 must be > 0");
    /* the scale alpha / r is a float in the model: it must be a normal one */
    ADAPTER_REFUSED("\"lora_alpha\":1e300,", "lora_alpha: 1e+300 must be > 0, with lora_alpha / r "
                                              "(r 8) a normal float");
    ADAPTER_REFUSED("\"lora_alpha\":1e-40,", "lora_alpha: 1e-40 must be > 0");
    ADAPTER_REFUSED("\"lora_alpha\":-16,", "lora_alpha: -16 must be > 0");
    REQUIRE_INT_EQ(acfg("{\"r\":8,\"lora_alpha\":1e-30,\"target_modules\":\"q_proj\"}", &c), 0);
    REQUIRE(acfg("{\"r\":8,\"target_modules\":[\"q_proj\",\"lm_head\"]}", &c) == PGRT_EINVAL);
    REQUIRE_CONTAINS(pgrt_last_message(), "target_modules: 'lm_head' is not a module");
    /* rsLoRA: the scale alpha / sqrt(r) */
    REQUIRE_INT_EQ(acfg("{\"r\":16,\"lora_alpha\":8,\"use_rslora\":true,"
                        "\"target_modules\":\"q_proj\"}", &c), 0);
    REQUIRE(c.rslora && pgrt_adapter_scale(&c) == 2.0);
    c.rslora = false;
    REQUIRE(pgrt_adapter_scale(&c) == 0.5);
    /* a string that is not a module name: PEFT's full-match pattern */
    REQUIRE_INT_EQ(acfg("{\"r\":8,\"target_modules\":\".*proj\"}", &c), 0);
    REQUIRE_INT_EQ(c.targets, 0x7f);
    REQUIRE_INT_EQ(acfg("{\"r\":8,\"target_modules\":"
                        "\".*\\\\.(q_proj|v_proj)\"}", &c), 0);
    REQUIRE_INT_EQ(c.targets, (1u << PGRT_LINEAR_Q) | (1u << PGRT_LINEAR_V));
    REQUIRE_INT_EQ(acfg("{\"r\":8,\"target_modules\":"
                        "\"model\\\\.layers\\\\.\\\\d+\\\\.mlp\\\\.(?:gate|up)_proj\"}", &c), 0);
    REQUIRE_INT_EQ(c.targets, (1u << PGRT_LINEAR_GATE) | (1u << PGRT_LINEAR_UP));
    REQUIRE(acfg("{\"r\":8,\"target_modules\":\".*\\\\.0\\\\..*q_proj\"}", &c) == PGRT_EINVAL);
    REQUIRE_CONTAINS(pgrt_last_message(), "selects other modules in layer 1 than in layer 0");
    REQUIRE(acfg("{\"r\":8,\"target_modules\":\"lm_head\"}", &c) == PGRT_EINVAL);
    REQUIRE_CONTAINS(pgrt_last_message(), "target_modules: 'lm_head' matches no module");
    REQUIRE(acfg("{\"r\":8,\"target_modules\":\"(q_proj\"}", &c) == PGRT_EINVAL);
    REQUIRE_CONTAINS(pgrt_last_message(), "is neither a module name");
    REQUIRE(acfg("{\"r\":8,\"target_modules\":[]}", &c) == PGRT_EINVAL);
    REQUIRE_CONTAINS(pgrt_last_message(), "target_modules: missing or empty");
    REQUIRE(acfg("{\"r\":8,\"target_modules\":[1]}", &c) == PGRT_EINVAL);
    REQUIRE_CONTAINS(pgrt_last_message(), "target_modules[0]: not a string");
    REQUIRE(acfg("{\"target_modules\":[\"q_proj\"]}", &c) == PGRT_EINVAL);
    REQUIRE_CONTAINS(pgrt_last_message(), "adapter_config.json: r: missing");
    REQUIRE(acfg("{\"r\":0,\"target_modules\":[\"q_proj\"]}", &c) == PGRT_ERANGE);
    REQUIRE_CONTAINS(pgrt_last_message(), "r: out of range");
}

static void test_adapter(void)
{
    pgrt_model_config mc = small_qwen();
    pgrt_adapter_config ac = {.r = 8, .alpha = 16, .targets = 0x7f};
    snprintf(ac.base_model, sizeof ac.base_model, "tiny/qwen\"2");
    pgrt_adapter *a = NULL, *b = NULL;
    REQUIRE_INT_EQ(pgrt_adapter_init(&mc, &ac, 42, &a), 0);
    REQUIRE_INT_EQ(a->count, 14);
    REQUIRE(a->w[0].layer == 0 && a->w[0].module == PGRT_LINEAR_Q && a->w[7].layer == 1);
    REQUIRE(a->w[6].in == 128 && a->w[6].out == 64); /* down_proj */
    REQUIRE(a->w[1].in == 64 && a->w[1].out == 32);  /* k_proj */
    bool bounded = true, bzero = true;
    double sum = 0, sq = 0;
    size_t cnt = 0;
    for (size_t i = 0; i < a->count; i++) {
        const pgrt_lora *w = &a->w[i];
        float bound = 1.0f / sqrtf((float)w->in);
        for (int k = 0; k < ac.r * w->in; k++) {
            if (!(fabsf(w->a[k]) <= bound))
                bounded = false;
            sum += w->a[k] * sqrt(w->in);
            sq += (double)w->a[k] * w->a[k] * w->in;
            cnt++;
        }
        for (int k = 0; k < ac.r * w->out; k++)
            bzero &= w->b[k] == 0;
    }
    REQUIRE(bounded && bzero);
    /* uniform on [-1, 1] after scaling: mean 0, variance 1/3 */
    REQUIRE(fabs(sum / (double)cnt) < 0.02);
    REQUIRE(fabs(sq / (double)cnt - 1.0 / 3) < 0.02);
    REQUIRE_INT_EQ(pgrt_adapter_init(&mc, &ac, 42, &b), 0);
    REQUIRE(memcmp(a->w[3].a, b->w[3].a, sizeof(float) * 8 * 64) == 0);
    pgrt_adapter_destroy(&b);
    REQUIRE_INT_EQ(pgrt_adapter_init(&mc, &ac, 43, &b), 0);
    REQUIRE(memcmp(a->w[3].a, b->w[3].a, sizeof(float) * 8 * 64) != 0);
    pgrt_adapter_destroy(&b);

    /* an alpha the model cannot use is refused at init and at save, so
     * that nothing is written that pgrt_adapter_load would refuse */
    pgrt_adapter_config bad = ac;
    bad.alpha = 0;
    REQUIRE_INT_EQ(pgrt_adapter_init(&mc, &bad, 42, &b), PGRT_ERANGE);
    REQUIRE_CONTAINS(pgrt_last_message(), "lora_alpha: 0 must be > 0");
    REQUIRE(b == NULL);
    bad.alpha = 1e300;
    REQUIRE_INT_EQ(pgrt_adapter_init(&mc, &bad, 42, &b), PGRT_ERANGE);
    bad.alpha = 1e-300;
    REQUIRE_INT_EQ(pgrt_adapter_init(&mc, &bad, 42, &b), PGRT_ERANGE);
    bad.alpha = NAN;
    REQUIRE_INT_EQ(pgrt_adapter_init(&mc, &bad, 42, &b), PGRT_ERANGE);

    /* save, load: the same numbers; the config reads back */
    for (size_t i = 0; i < a->count; i++)
        for (int k = 0; k < ac.r * a->w[i].out; k++)
            a->w[i].b[k] = (float)(k % 7) * 0.25f - (float)i;
    char dir[4096], sub[4096], p[4096];
    REQUIRE(scratch_dir(dir, sizeof dir) != NULL);
    path_in(sub, sizeof sub, dir, "adapter");
    REQUIRE_INT_EQ(pgrt_adapter_save(a, sub), 0);
    REQUIRE_INT_EQ(dir_entries(sub), 2);
    REQUIRE_INT_EQ(pgrt_adapter_load(sub, &mc, &b), 0);
    REQUIRE(b != NULL);
    if (b) {
        REQUIRE(b->cfg.r == 8 && b->cfg.alpha == 16 && b->cfg.targets == 0x7f);
        REQUIRE_STR_EQ(b->cfg.base_model, "tiny/qwen\"2");
        bool same = b->count == a->count;
        for (size_t i = 0; same && i < a->count; i++)
            same = !memcmp(a->w[i].a, b->w[i].a, sizeof(float) * 8 * (size_t)a->w[i].in) &&
                   !memcmp(a->w[i].b, b->w[i].b, sizeof(float) * 8 * (size_t)a->w[i].out);
        REQUIRE(same);
        pgrt_adapter_destroy(&b);
    }
    char name[160];
    REQUIRE_INT_EQ(pgrt_lora_name(1, PGRT_LINEAR_GATE, true, name, sizeof name), 0);
    REQUIRE_STR_EQ(name, "base_model.model.model.layers.1.mlp.gate_proj.lora_B.weight");
    pgrt_st_file *f = NULL;
    path_in(p, sizeof p, sub, "adapter_model.safetensors");
    REQUIRE_INT_EQ(pgrt_st_open(p, &f), 0);
    REQUIRE_INT_EQ(pgrt_st_count(f), 28);
    const pgrt_st_tensor *t = pgrt_st_find(f, name);
    REQUIRE(t && t->dtype == PGRT_ST_F32 && t->shape[0] == 128 && t->shape[1] == 8);
    pgrt_st_close(&f);

    /* a model with fewer layers or without some targets refuses it */
    pgrt_model_config one = mc;
    one.layers = 1;
    REQUIRE_INT_EQ(pgrt_adapter_load(sub, &one, &b), PGRT_EINVAL);
    REQUIRE_CONTAINS(pgrt_last_message(),
                     "tensor 'base_model.model.model.layers.1.mlp.down_proj.lora_A.weight' "
                     "names a layer the model lacks (1 layers)");
    write_text(sub, "adapter_config.json", "{\"r\":8,\"target_modules\":[\"q_proj\"]}");
    REQUIRE_INT_EQ(pgrt_adapter_load(sub, &mc, &b), PGRT_EINVAL);
    REQUIRE_CONTAINS(pgrt_last_message(), "layers.0.mlp.down_proj.lora_A.weight': down_proj is not in target_modules");
    write_text(sub, "adapter_config.json", "{\"r\":4,\"target_modules\":\"all-linear\"}");
    REQUIRE_INT_EQ(pgrt_adapter_load(sub, &mc, &b), PGRT_EINVAL);
    REQUIRE_CONTAINS(pgrt_last_message(), "lora_A.weight': shape is not [4, 64]");
    pgrt_model_config wide = mc;
    wide.intermediate = 256;
    write_text(sub, "adapter_config.json", "{\"r\":8,\"target_modules\":\"all-linear\"}");
    REQUIRE_INT_EQ(pgrt_adapter_load(sub, &wide, &b), PGRT_EINVAL);
    REQUIRE_CONTAINS(pgrt_last_message(), "gate_proj.lora_B.weight': shape is not [256, 8]");
    /* a tensor for a module these models lack */
    float z[8 * 64] = {0};
    pgrt_st_out extra[2] = {
        {.name = "base_model.model.lm_head.lora_A.weight", .dtype = PGRT_ST_F32, .ndim = 2,
         .shape = {8, 64}, .data = z},
        {.name = "base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight",
         .dtype = PGRT_ST_F32, .ndim = 2, .shape = {8, 64}, .data = z},
    };
    REQUIRE_INT_EQ(pgrt_st_write(p, extra, 2, NULL, NULL, 0), 0);
    write_text(sub, "adapter_config.json", "{\"r\":8,\"target_modules\":[\"q_proj\"]}");
    REQUIRE_INT_EQ(pgrt_adapter_load(sub, &mc, &b), PGRT_EINVAL);
    REQUIRE_CONTAINS(pgrt_last_message(),
                     "tensor 'base_model.model.lm_head.lora_A.weight' names a module the model "
                     "lacks");
    REQUIRE_INT_EQ(pgrt_st_write(p, extra + 1, 1, NULL, NULL, 0), 0);
    REQUIRE_INT_EQ(pgrt_adapter_load(sub, &mc, &b), PGRT_EINVAL);
    REQUIRE_CONTAINS(pgrt_last_message(), "layers.0.self_attn.q_proj.lora_B.weight' missing");
    REQUIRE(b == NULL);
    /* bf16 adapters are read (to f32) */
    uint16_t hb[8 * 64], hb2[64 * 8];
    for (int k = 0; k < 8 * 64; k++)
        hb[k] = hb2[k] = 0x3fc0; /* 1.5 */
    pgrt_st_out bt[4] = {
        {.name = "base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight",
         .dtype = PGRT_ST_BF16, .ndim = 2, .shape = {8, 64}, .data = hb},
        {.name = "base_model.model.model.layers.0.self_attn.q_proj.lora_B.weight",
         .dtype = PGRT_ST_F16, .ndim = 2, .shape = {64, 8}, .data = hb2},
        {.name = "base_model.model.model.layers.1.self_attn.q_proj.lora_A.weight",
         .dtype = PGRT_ST_BF16, .ndim = 2, .shape = {8, 64}, .data = hb},
        {.name = "base_model.model.model.layers.1.self_attn.q_proj.lora_B.weight",
         .dtype = PGRT_ST_BF16, .ndim = 2, .shape = {64, 8}, .data = hb2},
    };
    REQUIRE_INT_EQ(pgrt_st_write(p, bt, 4, NULL, NULL, 0), 0);
    REQUIRE_INT_EQ(pgrt_adapter_load(sub, &mc, &b), 0);
    if (b) {
        REQUIRE(b->w[0].a[5] == 1.5f);
        REQUIRE(b->w[0].b[5] == 1.9375f); /* 0x3fc0 as f16 */
        REQUIRE(b->w[1].b[0] == 1.5f);
        pgrt_adapter_destroy(&b);
    }
    /* an adapter whose alpha was changed to one load refuses is not saved */
    a->cfg.alpha = 0;
    char sub2[4096];
    path_in(sub2, sizeof sub2, dir, "alpha0");
    REQUIRE_INT_EQ(pgrt_adapter_save(a, sub2), PGRT_ERANGE);
    REQUIRE_CONTAINS(pgrt_last_message(), "lora_alpha: 0 must be > 0");
    REQUIRE(access(sub2, F_OK) != 0);
    a->cfg.alpha = 16;
    /* saving into a path that is a file fails and leaves it alone */
    REQUIRE_INT_EQ(pgrt_adapter_save(a, p), PGRT_EINVAL);
    REQUIRE_CONTAINS(pgrt_last_message(), "not a directory");
    pgrt_adapter_destroy(&a);
    REQUIRE(a == NULL);
    remove_tree(sub);
    remove_tree(dir);
}

/* PEFT's rank_pattern and alpha_pattern: kept in order; each pair gets the
 * first key that matches its path as get_pattern_key matches it
 * (re.match("(.*\.)?(KEY)$", path)); keys matching nothing are fine. The
 * numbers below are what PEFT's own get_pattern_key gives for these keys. */
static const char pattern_cfg[] =
    "{\"r\":16,\"lora_alpha\":32,\"target_modules\":\"all-linear\",%s"
    "\"rank_pattern\":{\"model.layers.1.self_attn.q_proj\":4,\"q_proj\":8,"
    "\"^self_attn.k_proj\":2,\"proj\":3,\"mlp\\\\.(gate|up)_proj\":24,"
    "\"layers\\\\.\\\\d+\\\\.mlp\\\\.down_proj\":72},"
    "\"alpha_pattern\":{\"o_proj\":24,\"model.layers.1.self_attn.o_proj\":12,"
    "\"^model\\\\.layers\\\\.0\\\\.mlp\\\\.up_proj\":3,\"(?:v|k)_proj\":64}}";

static int pattern_parse(bool rslora, pgrt_adapter_config *c)
{
    char buf[1024];
    snprintf(buf, sizeof buf, pattern_cfg, rslora ? "\"use_rslora\":true," : "");
    return acfg(buf, c);
}

/* layer, module, r, alpha, the keys that gave them (-1: none) */
static const struct {
    int layer;
    pgrt_linear m;
    int r;
    double alpha;
    int rk, ak;
} pattern_want[] = {
    {0, PGRT_LINEAR_Q, 8, 32, 1, -1},     {1, PGRT_LINEAR_Q, 4, 32, 0, -1},
    {0, PGRT_LINEAR_K, 16, 64, -1, 3},    {1, PGRT_LINEAR_V, 16, 64, -1, 3},
    {0, PGRT_LINEAR_O, 16, 24, -1, 0},    {1, PGRT_LINEAR_O, 16, 24, -1, 0},
    {0, PGRT_LINEAR_GATE, 24, 32, 4, -1}, {0, PGRT_LINEAR_UP, 24, 3, 4, 2},
    {1, PGRT_LINEAR_UP, 24, 32, 4, -1},   {1, PGRT_LINEAR_DOWN, 72, 32, 5, -1},
};

static void test_adapter_patterns(void)
{
    pgrt_adapter_config c;
    REQUIRE_INT_EQ(pattern_parse(false, &c), 0);
    REQUIRE_INT_EQ(c.n_rank_pattern, 6);
    REQUIRE_INT_EQ(c.n_alpha_pattern, 4);
    /* as given, in the file's order */
    REQUIRE_STR_EQ(c.rank_pattern[0].key, "model.layers.1.self_attn.q_proj");
    REQUIRE(c.rank_pattern[0].value == 4);
    REQUIRE_STR_EQ(c.rank_pattern[4].key, "mlp\\.(gate|up)_proj");
    REQUIRE_STR_EQ(c.rank_pattern[5].key, "layers\\.\\d+\\.mlp\\.down_proj");
    REQUIRE(c.rank_pattern[5].value == 72);
    REQUIRE_STR_EQ(c.alpha_pattern[3].key, "(?:v|k)_proj");
    REQUIRE(c.alpha_pattern[2].value == 3);
    REQUIRE(pgrt_adapter_scale(&c) == 2.0); /* the default stays alpha / r */
    for (size_t i = 0; i < sizeof pattern_want / sizeof pattern_want[0]; i++) {
        pgrt_lora_setting st = {0};
        REQUIRE_INT_EQ(pgrt_adapter_pair(&c, pattern_want[i].layer, pattern_want[i].m, &st), 0);
        REQUIRE_INT_EQ(st.r, pattern_want[i].r);
        REQUIRE(st.alpha == pattern_want[i].alpha);
        REQUIRE_INT_EQ(st.rank_key, pattern_want[i].rk);
        REQUIRE_INT_EQ(st.alpha_key, pattern_want[i].ak);
        REQUIRE(st.scale == pattern_want[i].alpha / pattern_want[i].r);
    }
    /* rsLoRA: alpha / sqrt(r), each pair with its own */
    pgrt_adapter_config cr;
    REQUIRE_INT_EQ(pattern_parse(true, &cr), 0);
    pgrt_lora_setting st;
    REQUIRE_INT_EQ(pgrt_adapter_pair(&cr, 1, PGRT_LINEAR_DOWN, &st), 0);
    REQUIRE(st.r == 72 && st.scale == 32 / sqrt(72.0));
    REQUIRE_INT_EQ(pgrt_adapter_pair(&cr, 0, PGRT_LINEAR_UP, &st), 0);
    REQUIRE(st.r == 24 && st.scale == 3 / sqrt(24.0));
    REQUIRE(pgrt_adapter_scale(&cr) == 32 / sqrt(16.0));
    REQUIRE_INT_EQ(pgrt_adapter_pair(&c, -1, PGRT_LINEAR_Q, &st), PGRT_EINVAL);

    /* the same pairs in a fresh adapter: each of its rank and scale */
    pgrt_model_config mc = small_qwen();
    pgrt_adapter *a = NULL, *b = NULL;
    REQUIRE_INT_EQ(pgrt_adapter_init(&mc, &c, 5, &a), 0);
    if (!a)
        return;
    REQUIRE_INT_EQ(a->count, 14);
    for (size_t i = 0; i < sizeof pattern_want / sizeof pattern_want[0]; i++) {
        const pgrt_lora *w = &a->w[pattern_want[i].layer * 7 + (int)pattern_want[i].m];
        REQUIRE(w->layer == pattern_want[i].layer && w->module == pattern_want[i].m);
        REQUIRE_INT_EQ(w->r, pattern_want[i].r);
        REQUIRE(w->alpha == pattern_want[i].alpha);
        REQUIRE(w->scale == pattern_want[i].alpha / pattern_want[i].r);
    }
    const pgrt_lora *down = &a->w[13];
    REQUIRE(down->in == 128 && down->r == 72);
    float bound = 1.0f / sqrtf(128.0f);
    bool bounded = true;
    for (int k = 0; k < 72 * 128; k++) /* A [72, 128], all of it initialised */
        bounded &= fabsf(down->a[k]) <= bound && down->a[k] != 0;
    REQUIRE(bounded);
    for (size_t i = 0; i < a->count; i++)
        for (int k = 0; k < a->w[i].r * a->w[i].out; k++)
            a->w[i].b[k] = (float)((int)i - k % 5) * 0.125f;

    /* save, load: the patterns as given, in their order, for PEFT too */
    char dir[4096], sub[4096], p[4096];
    REQUIRE(scratch_dir(dir, sizeof dir) != NULL);
    path_in(sub, sizeof sub, dir, "adapter");
    REQUIRE_INT_EQ(pgrt_adapter_save(a, sub), 0);
    path_in(p, sizeof p, sub, "adapter_config.json");
    char *text = NULL;
    size_t len = 0;
    FILE *f = fopen(p, "rb");
    REQUIRE(f != NULL);
    if (f) {
        text = calloc(1, 65536);
        len = fread(text, 1, 65535, f);
        fclose(f);
    }
    REQUIRE(text && len > 0);
    if (text) {
        REQUIRE_CONTAINS(text, "\"alpha_pattern\": {\n    \"o_proj\": 24,\n    "
                               "\"model.layers.1.self_attn.o_proj\": 12,\n    "
                               "\"^model\\\\.layers\\\\.0\\\\.mlp\\\\.up_proj\": 3,\n    "
                               "\"(?:v|k)_proj\": 64\n  },\n");
        REQUIRE_CONTAINS(text, "\"r\": 16,\n  \"rank_pattern\": {\n    "
                               "\"model.layers.1.self_attn.q_proj\": 4,\n    \"q_proj\": 8,\n");
        REQUIRE_CONTAINS(text, "\"layers\\\\.\\\\d+\\\\.mlp\\\\.down_proj\": 72\n  },\n");
        free(text);
    }
    REQUIRE_INT_EQ(pgrt_adapter_load(sub, &mc, &b), 0);
    if (b) {
        REQUIRE(b->cfg.n_rank_pattern == 6 && b->cfg.n_alpha_pattern == 4);
        bool same = b->count == a->count;
        for (int i = 0; same && i < 6; i++)
            same = !strcmp(a->cfg.rank_pattern[i].key, b->cfg.rank_pattern[i].key) &&
                   a->cfg.rank_pattern[i].value == b->cfg.rank_pattern[i].value;
        for (int i = 0; same && i < 4; i++)
            same = !strcmp(a->cfg.alpha_pattern[i].key, b->cfg.alpha_pattern[i].key) &&
                   a->cfg.alpha_pattern[i].value == b->cfg.alpha_pattern[i].value;
        for (size_t i = 0; same && i < a->count; i++) {
            const pgrt_lora *x = &a->w[i], *y = &b->w[i];
            same = x->r == y->r && x->scale == y->scale &&
                   !memcmp(x->a, y->a, sizeof(float) * (size_t)x->r * (size_t)x->in) &&
                   !memcmp(x->b, y->b, sizeof(float) * (size_t)x->r * (size_t)x->out);
        }
        REQUIRE(same);
        pgrt_adapter_destroy(&b);
    }
    pgrt_st_file *sf = NULL;
    path_in(p, sizeof p, sub, "adapter_model.safetensors");
    REQUIRE_INT_EQ(pgrt_st_open(p, &sf), 0);
    const pgrt_st_tensor *t = pgrt_st_find(
        sf, "base_model.model.model.layers.1.self_attn.q_proj.lora_B.weight");
    REQUIRE(t && t->shape[0] == 64 && t->shape[1] == 4);
    pgrt_st_close(&sf);

    /* a config whose patterns give a pair another rank than its tensors:
     * refused, naming the tensor */
    write_text(sub, "adapter_config.json",
               "{\"r\":16,\"lora_alpha\":32,\"target_modules\":\"all-linear\","
               "\"rank_pattern\":{\"q_proj\":8,\"mlp\\\\.(gate|up)_proj\":24,"
               "\"down_proj\":72}}");
    REQUIRE_INT_EQ(pgrt_adapter_load(sub, &mc, &b), PGRT_EINVAL);
    REQUIRE_CONTAINS(pgrt_last_message(),
                     "tensor 'base_model.model.model.layers.1.self_attn.q_proj.lora_A.weight': "
                     "shape is not [8, 64] (this pair's r is 8)");
    REQUIRE(b == NULL);
    write_text(sub, "adapter_config.json",
               "{\"r\":16,\"lora_alpha\":32,\"target_modules\":\"all-linear\","
               "\"rank_pattern\":{\"model.layers.1.self_attn.q_proj\":4,\"q_proj\":8,"
               "\"up_proj\":24,\"gate_proj\":24,\"down_proj\":64}}");
    REQUIRE_INT_EQ(pgrt_adapter_load(sub, &mc, &b), PGRT_EINVAL);
    REQUIRE_CONTAINS(pgrt_last_message(),
                     "tensor 'base_model.model.model.layers.0.mlp.down_proj.lora_A.weight': "
                     "shape is not [64, 128]");

    /* a pair whose scale is not a normal float is refused, named with the
     * keys that gave it; the same key matching nothing is fine */
    pgrt_adapter_config bad = c;
    REQUIRE_INT_EQ(pgrt_adapter_pattern_add(&bad, true, "^model.layers.0.mlp.down_proj", 1e-40),
                   0);
    REQUIRE_INT_EQ(bad.n_alpha_pattern, 5);
    REQUIRE_INT_EQ(pgrt_adapter_init(&mc, &bad, 5, &b), PGRT_ERANGE);
    REQUIRE_CONTAINS(pgrt_last_message(),
                     "model.layers.0.mlp.down_proj: lora_alpha / r = 1e-40 / 72 (from "
                     "alpha_pattern '^model.layers.0.mlp.down_proj' and rank_pattern "
                     "'layers\\\\.\\\\d+\\\\.mlp\\\\.down_proj') is not a normal float");
    REQUIRE(b == NULL);
    bad = c;
    REQUIRE_INT_EQ(pgrt_adapter_pattern_add(&bad, true, "^layers.0.mlp.down_proj", 1e-40), 0);
    REQUIRE_INT_EQ(pgrt_adapter_init(&mc, &bad, 5, &b), 0);
    pgrt_adapter_destroy(&b);
    /* pgrt_adapter_pattern_add refuses what the parser refuses, and a key
     * twice; c is left as it was */
    bad = c;
    REQUIRE_INT_EQ(pgrt_adapter_pattern_add(&bad, false, "q_proj", 4), PGRT_EINVAL);
    REQUIRE_CONTAINS(pgrt_last_message(), "rank_pattern: 'q_proj' is given twice");
    REQUIRE_INT_EQ(pgrt_adapter_pattern_add(&bad, false, "o_proj", 2.5), PGRT_EINVAL);
    REQUIRE_CONTAINS(pgrt_last_message(), "rank_pattern: 'o_proj': 2.5 is not a rank");
    REQUIRE_INT_EQ(pgrt_adapter_pattern_add(&bad, true, "o_proj[", 2), PGRT_EINVAL);
    REQUIRE_CONTAINS(pgrt_last_message(), "alpha_pattern: 'o_proj[' is not a regular expression");
    REQUIRE_INT_EQ(bad.n_rank_pattern, 6);
    REQUIRE_INT_EQ(bad.n_alpha_pattern, 4);
    pgrt_adapter_config full = {.r = 8, .alpha = 8, .targets = 1u};
    for (int i = 0; i < PGRT_ADAPTER_PATTERNS; i++) {
        char key[32];
        snprintf(key, sizeof key, "layers.%d.self_attn.q_proj", i);
        REQUIRE_INT_EQ(pgrt_adapter_pattern_add(&full, false, key, 1 + i % 3), 0);
    }
    REQUIRE_INT_EQ(pgrt_adapter_pattern_add(&full, false, "k_proj", 4), PGRT_ERANGE);
    REQUIRE_CONTAINS(pgrt_last_message(), "rank_pattern: more than 64 entries");
    REQUIRE_INT_EQ(pgrt_adapter_pair(&full, 5, PGRT_LINEAR_Q, &st), 0);
    REQUIRE(st.r == 3 && st.rank_key == 5);

    /* a pair edited away from its config is not saved */
    a->cfg.rank_pattern[1].value = 16;
    path_in(p, sizeof p, dir, "edited");
    REQUIRE_INT_EQ(pgrt_adapter_save(a, p), PGRT_EINVAL);
    REQUIRE_CONTAINS(pgrt_last_message(), "adapter: layer 0 q_proj: r 8 and scale 4 are not what "
                                          "its config gives (r 16, scale 2)");
    REQUIRE(access(p, F_OK) != 0);
    pgrt_adapter_destroy(&a);
    remove_tree(sub);
    remove_tree(dir);
}

static void test_tokens(void)
{
    char dir[4096], p[4096];
    REQUIRE(scratch_dir(dir, sizeof dir) != NULL);
    path_in(p, sizeof p, dir, "tokens.bin");
    uint8_t ids[4 * 5];
    for (int i = 0; i < 5; i++) {
        uint32_t v = (uint32_t)(i * 50 + 3);
        for (int b = 0; b < 4; b++)
            ids[4 * i + b] = (uint8_t)(v >> (8 * b));
    }
    write_bytes(p, ids, sizeof ids);
    pgrt_tokens *t = NULL;
    REQUIRE_INT_EQ(pgrt_tokens_open(p, 256, &t), 0);
    REQUIRE_INT_EQ(pgrt_tokens_count(t), 5);
    int32_t out[7];
    pgrt_tokens_batch(t, 0, 3, out);
    REQUIRE(out[0] == 3 && out[1] == 53 && out[2] == 103);
    pgrt_tokens_batch(t, 1, 3, out); /* 3, 4, then wraps to 0 */
    REQUIRE(out[0] == 153 && out[1] == 203 && out[2] == 3);
    pgrt_tokens_batch(t, 3, 7, out); /* starts at 21 mod 5 = 1, wraps twice */
    REQUIRE(out[0] == 53 && out[4] == 3 && out[5] == 53 && out[6] == 103);
    pgrt_tokens_batch(t, UINT64_MAX, 4, out); /* (2^64-1)*4 mod 5 = 0 */
    REQUIRE(out[0] == 3);
    pgrt_tokens_close(&t);
    REQUIRE(t == NULL);
    REQUIRE_INT_EQ(pgrt_tokens_open(p, 200, &t), PGRT_ERANGE);
    REQUIRE_CONTAINS(pgrt_last_message(), "token id 203 at byte 16 is outside [0, 200)");
    ids[8] = 0xff, ids[9] = 0xff, ids[10] = 0xff, ids[11] = 0xff;
    write_bytes(p, ids, sizeof ids);
    REQUIRE_INT_EQ(pgrt_tokens_open(p, 256, &t), PGRT_ERANGE);
    REQUIRE_CONTAINS(pgrt_last_message(), "token id -1 at byte 8");
    write_bytes(p, ids, 6);
    REQUIRE_INT_EQ(pgrt_tokens_open(p, 256, &t), PGRT_EINVAL);
    REQUIRE_CONTAINS(pgrt_last_message(), "6 bytes, not a whole number of int32 ids");
    write_bytes(p, ids, 0);
    REQUIRE_INT_EQ(pgrt_tokens_open(p, 256, &t), PGRT_EINVAL);
    REQUIRE_CONTAINS(pgrt_last_message(), "empty token file");
    REQUIRE_INT_EQ(pgrt_tokens_open(dir, 256, &t), PGRT_EINVAL);
    REQUIRE_CONTAINS(pgrt_last_message(), "not a regular file");
    /* a FIFO is refused at once, not waited on */
    path_in(p, sizeof p, dir, "fifo");
    if (mkfifo(p, 0600) == 0) {
        REQUIRE_INT_EQ(pgrt_tokens_open(p, 256, &t), PGRT_EINVAL);
        REQUIRE_CONTAINS(pgrt_last_message(), "not a regular file");
        unlink(p);
    }
    REQUIRE(t == NULL);
    remove_tree(dir);
}

/* pgrt_lm checks its float params as floats (no device needed for
 * pgrt_lm_bytes): 0 or normal, and the LoRA scale normal. */
static void test_lm_params(void)
{
    char dir[4096];
    REQUIRE(scratch_dir(dir, sizeof dir) != NULL);
    REQUIRE_INT_EQ(write_model(dir, ALL, ""), 0);
    pgrt_model_files *m = NULL;
    REQUIRE_INT_EQ(pgrt_model_open(dir, &m), 0);
    pgrt_adapter_config ac = {.r = 4, .alpha = 8, .targets = 1u << PGRT_LINEAR_Q};
    pgrt_adapter *a = NULL;
    REQUIRE_INT_EQ(pgrt_adapter_init(pgrt_model_files_config(m), &ac, 1, &a), 0);
    if (!m || !a) {
        remove_tree(dir);
        return;
    }
    pgrt_lm_params p = {.model = m, .adapter = a, .batch = 1, .seq = 4, .lr = 1e-3f,
                        .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f, .weight_decay = 0.01f,
                        .max_norm = 1};
    uint64_t bytes = 0;
    REQUIRE_INT_EQ(pgrt_lm_bytes(&p, &bytes), 0);
    REQUIRE(bytes > 0);
    p.lr = 1e-40f; /* subnormal: trains with 0 where denormals flush */
    REQUIRE_INT_EQ(pgrt_lm_bytes(&p, &bytes), PGRT_EINVAL);
    REQUIRE_CONTAINS(pgrt_last_message(), "must each be 0 or a normal float");
    p.lr = 0;
    REQUIRE_INT_EQ(pgrt_lm_bytes(&p, &bytes), 0);
    p.weight_decay = INFINITY;
    REQUIRE_INT_EQ(pgrt_lm_bytes(&p, &bytes), PGRT_EINVAL);
    p.weight_decay = 0.01f;
    p.max_norm = 1e-45f;
    REQUIRE_INT_EQ(pgrt_lm_bytes(&p, &bytes), PGRT_EINVAL);
    p.max_norm = 1;
    a->cfg.alpha = 1e300; /* alpha / r overflows a float */
    REQUIRE_INT_EQ(pgrt_lm_bytes(&p, &bytes), PGRT_ERANGE);
    REQUIRE_CONTAINS(pgrt_last_message(), "the LoRA scale lora_alpha / r = 1e+300 / 4");
    pgrt_adapter_destroy(&a);
    pgrt_model_close(&m);
    remove_tree(dir);
}

/* pgrt_lm's plan (pgrt_lm_bytes: arena, LoRA state) counts each pair's
 * rank: the saved xa takes T x the sum of the ranks, the dxa scratch
 * 3 T x the largest, the four f32 copies of the LoRA matrices r (in + out)
 * a pair. A pair that is not what its config gives is refused. */
static void test_lm_plan_patterns(void)
{
    char dir[4096];
    REQUIRE(scratch_dir(dir, sizeof dir) != NULL);
    REQUIRE_INT_EQ(write_model(dir, ALL, ""), 0);
    pgrt_model_files *m = NULL;
    REQUIRE_INT_EQ(pgrt_model_open(dir, &m), 0);
    pgrt_adapter_config uc = {.r = 16, .alpha = 32, .targets = 0x7f};
    pgrt_adapter_config pc = uc, nc = uc;
    REQUIRE_INT_EQ(pgrt_adapter_pattern_add(&pc, false, "q_proj", 8), 0);
    REQUIRE_INT_EQ(pgrt_adapter_pattern_add(&pc, false, "down_proj", 40), 0);
    REQUIRE_INT_EQ(pgrt_adapter_pattern_add(&pc, true, "down_proj", 4), 0);
    REQUIRE_INT_EQ(pgrt_adapter_pattern_add(&nc, false, "lm_head", 8), 0); /* matches nothing */
    pgrt_adapter *ua = NULL, *pa = NULL, *na = NULL;
    if (!m || pgrt_adapter_init(pgrt_model_files_config(m), &uc, 1, &ua) ||
        pgrt_adapter_init(pgrt_model_files_config(m), &pc, 1, &pa) ||
        pgrt_adapter_init(pgrt_model_files_config(m), &nc, 1, &na)) {
        REQUIRE(!"model and adapters");
        goto out;
    }
    for (int dt = 0; dt < 2; dt++) {
        pgrt_lm_params p = {.model = m, .adapter = ua, .batch = 2, .seq = 8, .lr = 1e-3f,
                            .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f, .max_norm = 1,
                            .dtype = dt ? PGRT_LM_BF16 : PGRT_LM_F32};
        uint64_t ub = 0, pb = 0, nb = 0;
        REQUIRE_INT_EQ(pgrt_lm_bytes(&p, &ub), 0);
        p.adapter = pa;
        REQUIRE_INT_EQ(pgrt_lm_bytes(&p, &pb), 0);
        p.adapter = na;
        REQUIRE_INT_EQ(pgrt_lm_bytes(&p, &nb), 0);
        REQUIRE(nb == ub);
        /* two layers: q 16 -> 8 ([64, 64]), down 16 -> 40 ([64, 128]) */
        const int64_t T = 16, drsum = 2 * ((8 - 16) + (40 - 16)), drmax = 40 - 16;
        const int64_t dlora = 2 * ((8 - 16) * (64 + 64) + (40 - 16) * (128 + 64));
        int64_t want = 4 * (T * drsum + 3 * T * drmax) + 4 * 4 * dlora;
        REQUIRE_INT_EQ((long long)((int64_t)pb - (int64_t)ub), (long long)want);
    }
    /* a pair's r or scale other than its config's */
    pgrt_lm_params p = {.model = m, .adapter = pa, .batch = 2, .seq = 8, .lr = 1e-3f,
                        .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f, .max_norm = 1};
    uint64_t bytes;
    pa->w[0].r = 16;
    REQUIRE_INT_EQ(pgrt_lm_bytes(&p, &bytes), PGRT_EINVAL);
    REQUIRE_CONTAINS(pgrt_last_message(), "pgrt_lm: adapter module q_proj of layer 0: r 16 and "
                                          "scale 4, its config gives r 8 and scale 4");
    pa->w[0].r = 8;
    REQUIRE_INT_EQ(pgrt_lm_bytes(&p, &bytes), 0);
    pa->w[13].scale = 2;
    REQUIRE_INT_EQ(pgrt_lm_bytes(&p, &bytes), PGRT_EINVAL);
    REQUIRE_CONTAINS(pgrt_last_message(), "module down_proj of layer 1: r 40 and scale 2, its "
                                          "config gives r 40 and scale 0.1");
out:
    pgrt_adapter_destroy(&ua);
    pgrt_adapter_destroy(&pa);
    pgrt_adapter_destroy(&na);
    pgrt_model_close(&m);
    remove_tree(dir);
}

/* Strings from config.json, adapter_config.json, tensor names and paths
 * reach a message escaped: "\x1b]0;pwned\x07" would retitle the terminal,
 * "\x1b[2J" clear it. */
#define ESCAPED(call, want)                                                    \
    do {                                                                       \
        REQUIRE((call) < 0);                                                   \
        REQUIRE_CONTAINS(pgrt_last_message(), (want));                         \
        REQUIRE(printable_line(pgrt_last_message()));                          \
    } while (0)

static void test_escapes(void)
{
    pgrt_model_config c;
    ESCAPED(cfg_parse("{\"model_type\":\"\\u001b]0;pwned\\u0007\"}", &c),
            "model_type: '\\x1b]0;pwned\\x07' is not supported");
    ESCAPED(cfg_with("\"hidden_act\":\"\\u001b[2J\",", &c), "hidden_act: '\\x1b[2J'");
    ESCAPED(cfg_with("\"rope_scaling\":{\"rope_type\":\"x\\u001b[2J\"},", &c),
            "unsupported rope type 'x\\x1b[2J'");
    pgrt_adapter_config ac;
    ESCAPED(acfg("{\"r\":8,\"target_modules\":[\"\\u001b]0;pwned\\u0007\"]}", &ac),
            "target_modules: '\\x1b]0;pwned\\x07' is not a module");
    ESCAPED(acfg("{\"r\":8,\"target_modules\":\"q_proj\",\"bias\":\"\\u0007\"}", &ac),
            "bias: '\\x07' is not supported");

    /* a model directory with a tensor the model lacks */
    char dir[4096], p[4096];
    REQUIRE(scratch_dir(dir, sizeof dir) != NULL);
    REQUIRE_INT_EQ(write_model(dir, EXTRA, "model.\x1b]0;pwned\x07"), 0);
    pgrt_model_files *m = NULL;
    ESCAPED(pgrt_model_open(dir, &m), "tensor 'model.\\x1b]0;pwned\\x07' is not used");
    /* an adapter with one */
    pgrt_model_config mc = small_qwen();
    pgrt_adapter_config one = {.r = 2, .alpha = 4, .targets = 1u << PGRT_LINEAR_Q};
    pgrt_adapter *a = NULL, *b = NULL;
    REQUIRE_INT_EQ(pgrt_adapter_init(&mc, &one, 1, &a), 0);
    char sub[4096];
    path_in(sub, sizeof sub, dir, "adapter");
    REQUIRE_INT_EQ(pgrt_adapter_save(a, sub), 0);
    float z[2 * 64] = {0};
    pgrt_st_out t = {.name = "base_model.\x1b[2J", .dtype = PGRT_ST_F32, .ndim = 2,
                     .shape = {2, 64}, .data = z};
    path_in(p, sizeof p, sub, "adapter_model.safetensors");
    REQUIRE_INT_EQ(pgrt_st_write(p, &t, 1, NULL, NULL, 0), 0);
    ESCAPED(pgrt_adapter_load(sub, &mc, &b), "tensor 'base_model.\\x1b[2J' names a module");
    REQUIRE(b == NULL);
    pgrt_adapter_destroy(&a);
    /* paths */
    pgrt_tokens *tok = NULL;
    path_in(p, sizeof p, dir, "tokens\x1b]0;pwned\x07.bin");
    ESCAPED(pgrt_tokens_open(p, 256, &tok), "tokens\\x1b]0;pwned\\x07.bin: No such file");
    write_bytes(p, "abc", 3);
    ESCAPED(pgrt_tokens_open(p, 256, &tok), "tokens\\x1b]0;pwned\\x07.bin: 3 bytes");
    path_in(p, sizeof p, dir, "\x1b[2J");
    ESCAPED(pgrt_model_open(p, &m), "/\\x1b[2J/config.json: No such file");
    ESCAPED(pgrt_adapter_load(p, &mc, &b), "/\\x1b[2J/adapter_config.json: No such file");
    remove_tree(sub);
    remove_tree(dir);
}

int main(void)
{
    test_config();
    test_config_llama3();
    test_config_mistral();
    test_config_qwen3();
    test_rope_scale();
    test_specs();
    test_model_dir();
    test_adapter_config();
    test_adapter();
    test_adapter_patterns();
    test_tokens();
    test_lm_params();
    test_lm_plan_patterns();
    test_escapes();
    TEST_DONE();
}
