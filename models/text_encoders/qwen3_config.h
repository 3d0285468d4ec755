// The hyper-parameters of a Qwen3 decoder (transformers' Qwen3Config), read from `config.json`
// with transformers' defaults for every key left out. Used both as an LLM (Qwen3ForCausalLM) and
// as a text encoder (Z-Image's Qwen3Model, whose hidden_states[-2] is the prompt embedding).
//
// The same decoder, with two switches, is Qwen2.5-VL's language model (model_type "qwen2_5_vl",
// Qwen-Image's text encoder): q/k/v projections with biases and no output bias (qkv_bias), no
// per-head q/k RMSNorm (qk_norm false), head_dim = hidden_size / num_attention_heads, and the
// text hyper-parameters under "text_config" (transformers 5) or at the top level (v4 configs).
// Its multimodal RoPE is plain RoPE for text: see read_mrope in qwen3_config.cpp.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "attention/paged/paged_layer.h"
#include "core/file.h"

namespace mmgen::text_encoders {

struct Qwen3Config {
  int64_t vocab_size = 151936;
  int64_t hidden_size = 4096;
  int64_t intermediate_size = 22016;
  int64_t num_hidden_layers = 32;
  int64_t num_attention_heads = 32;
  int64_t num_key_value_heads = 32;
  int64_t head_dim = 128;
  int64_t max_position_embeddings = 32768;
  float rms_norm_eps = 1e-6f;
  bool tie_word_embeddings = false;
  bool attention_bias = false;  // q/k/v/o projections carry biases
  bool qkv_bias = false;        // q/k/v projections carry biases, o does not (Qwen2 family)
  bool qk_norm = true;          // per-head RMSNorm of q and k before RoPE (Qwen3 only)
  std::string model_type = "qwen3";

  // RoPE (rotate-half convention). "default" or "linear" (positions divided by rope_factor).
  std::string rope_type = "default";
  double rope_theta = 10000.0;
  double rope_factor = 1.0;

  // Per layer: 0 for full causal attention, else the sliding window in keys (transformers'
  // convention: a query at position q sees keys k with q - window < k <= q).
  std::vector<int64_t> layer_windows;

  // SGLang's dual_chunk_attention_config (Qwen2.5-1M and the 1M-context Qwen3 configs): when set,
  // RoPE rotates keys at position % chunk_len and queries three ways, and the attention is dual
  // chunk attention (attention/paged/paged_layer.h), which only dual_chunk_flash_attn runs.
  attention::paged::DualChunk dual_chunk;

  int64_t kv_group_size() const { return num_attention_heads / num_key_value_heads; }
  int64_t q_width() const { return num_attention_heads * head_dim; }
  int64_t kv_width() const { return num_key_value_heads * head_dim; }

  // `where` names the source in error messages.
  static Qwen3Config from_json(const nlohmann::json& json,
                               const std::string& where = "config.json");
  static Qwen3Config from_file(const fs::path& config_json);
};

}  // namespace mmgen::text_encoders
