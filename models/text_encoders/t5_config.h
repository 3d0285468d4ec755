// The hyper-parameters of a T5 / UMT5 encoder, read from a transformers `config.json`.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "core/activation.h"
#include "core/file.h"

namespace mmgen::text_encoders {

// The feed-forward activation (transformers' `dense_act_fn`, derived from `feed_forward_proj`).
using T5Activation = Activation;  // the feed-forward's (core/activation.h)

struct T5Config {
  // "umt5": every layer owns a relative-position table; "t5": block 0's table serves every layer.
  std::string model_type = "umt5";
  int64_t vocab_size = 250112;
  int64_t d_model = 512;
  int64_t d_kv = 64;
  int64_t d_ff = 1024;
  int64_t num_heads = 6;
  int64_t num_layers = 8;
  int64_t relative_attention_num_buckets = 32;
  int64_t relative_attention_max_distance = 128;
  float layer_norm_epsilon = 1e-6f;
  std::string feed_forward_proj = "gated-gelu";
  T5Activation activation = T5Activation::GeluTanh;
  bool gated = true;  // "gated-*": wo(act(wi_0 x) * wi_1 x); otherwise wo(act(wi x))

  bool per_layer_position_bias() const { return model_type == "umt5"; }
  int64_t inner_dim() const { return num_heads * d_kv; }

  // Keys left out take transformers' defaults for that model_type (T5Config / UMT5Config).
  // `where` names the source in error messages.
  static T5Config from_json(const nlohmann::json& json, const std::string& where = "config.json");
  static T5Config from_file(const fs::path& config_json);
};

}  // namespace mmgen::text_encoders
