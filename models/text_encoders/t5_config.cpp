#include "models/text_encoders/t5_config.h"

#include <string_view>
#include <vector>

#include "core/error.h"
#include "core/json.h"
#include "core/limits.h"
#include "models/text_encoders/encoder_config_fields.h"

namespace mmgen::text_encoders {
namespace {

// transformers' ACT2FN names that a T5 feed-forward can use.
T5Activation t5_activation_named(const std::string& name, const std::string& where) {
  if (name == "relu") return T5Activation::Relu;
  if (name == "gelu") return T5Activation::Gelu;
  if (name == "gelu_new" || name == "gelu_pytorch_tanh") return T5Activation::GeluTanh;
  if (name == "silu" || name == "swish") return T5Activation::Silu;
  fail(
      "{}: feed_forward_proj activation \"{}\" is not supported (use relu, gelu, gelu_new or silu, "
      "optionally as \"gated-...\")",
      where, name);
}

}  // namespace

T5Config T5Config::from_json(const nlohmann::json& json, const std::string& where) {
  check(json.is_object(), "{}: expected a JSON object", where);
  T5Config config;
  config.model_type = string_field(json, "model_type", config.model_type, where);
  check(config.model_type == "umt5" || config.model_type == "t5",
        "{}: model_type \"{}\" is not a T5 encoder this loader knows (expected \"umt5\" or \"t5\")",
        where, config.model_type);

  // transformers' defaults differ between the two config classes.
  const bool umt5 = config.model_type == "umt5";
  config.vocab_size = umt5 ? 250112 : 32128;
  config.d_model = 512;
  config.d_kv = 64;
  config.d_ff = umt5 ? 1024 : 2048;
  config.num_heads = umt5 ? 6 : 8;
  config.num_layers = umt5 ? 8 : 6;
  config.relative_attention_num_buckets = 32;
  config.relative_attention_max_distance = 128;
  read_config_integers(
      json,
      {{"vocab_size", config.vocab_size},
       {"d_model", config.d_model},
       {"d_kv", config.d_kv},
       {"d_ff", config.d_ff},
       {"num_heads", config.num_heads},
       {"num_layers", config.num_layers},
       {"relative_attention_num_buckets", config.relative_attention_num_buckets},
       {"relative_attention_max_distance", config.relative_attention_max_distance}},
      where, 1, kEncoderConfigFix);
  check(config.relative_attention_num_buckets >= 4,
        "{}: relative_attention_num_buckets {} is too small (at least 4)", where,
        config.relative_attention_num_buckets);
  check(config.relative_attention_max_distance > config.relative_attention_num_buckets / 4,
        "{}: relative_attention_max_distance {} must exceed num_buckets / 4", where,
        config.relative_attention_max_distance);

  config.layer_norm_epsilon =
      positive_float(json, "layer_norm_epsilon", config.layer_norm_epsilon, where);
  config.feed_forward_proj =
      string_field(json, "feed_forward_proj", umt5 ? "gated-gelu" : "relu", where);
  // "gated-ACT" or "ACT", as transformers parses it; "gated-gelu" means the tanh GELU.
  const std::string& proj = config.feed_forward_proj;
  const size_t dash = proj.find('-');
  std::string activation = proj;
  config.gated = false;
  if (dash != std::string::npos) {
    check(proj.substr(0, dash) == "gated" && proj.find('-', dash + 1) == std::string::npos,
          "{}: feed_forward_proj \"{}\" should be \"ACT\" or \"gated-ACT\" (e.g. \"gated-gelu\")",
          where, proj);
    config.gated = true;
    activation = proj.substr(dash + 1);
  }
  config.activation =
      proj == "gated-gelu" ? T5Activation::GeluTanh : t5_activation_named(activation, where);
  return config;
}

T5Config T5Config::from_file(const fs::path& config_json) {
  return from_json(read_encoder_config(config_json), config_json.string());
}

}  // namespace mmgen::text_encoders
