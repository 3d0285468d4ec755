#include "models/text_encoders/clip_config.h"

#include "core/error.h"
#include "core/json.h"
#include "core/limits.h"
#include "models/text_encoders/encoder_config_fields.h"

namespace mmgen::text_encoders {
namespace {

ClipActivation clip_activation_named(const std::string& name, const std::string& where) {
  if (name == "quick_gelu") return ClipActivation::QuickGelu;
  if (name == "gelu") return ClipActivation::Gelu;
  if (name == "gelu_new" || name == "gelu_pytorch_tanh") return ClipActivation::GeluTanh;
  fail("{}: hidden_act \"{}\" is not supported for CLIP (use quick_gelu, gelu or gelu_new)", where,
       name);
}

}  // namespace

ClipTextConfig ClipTextConfig::from_json(const nlohmann::json& root, const std::string& where) {
  check(root.is_object(), "{}: expected a JSON object", where);
  const std::string model_type = string_field(root, "model_type", "clip_text_model", where);
  // A whole CLIPModel's config keeps the text encoder's under text_config.
  const bool whole = model_type == "clip" && root.contains("text_config");
  check(model_type == "clip_text_model" || whole,
        "{}: model_type \"{}\" is not a CLIP text encoder (expected \"clip_text_model\")", where,
        model_type);
  const nlohmann::json& json = whole ? root["text_config"] : root;
  check(json.is_object(), "{}: \"text_config\" must be an object", where);

  ClipTextConfig config;
  read_config_integers(json,
                       {{"vocab_size", config.vocab_size},
                        {"hidden_size", config.hidden_size},
                        {"intermediate_size", config.intermediate_size},
                        {"num_hidden_layers", config.num_hidden_layers},
                        {"num_attention_heads", config.num_attention_heads},
                        {"max_position_embeddings", config.max_position_embeddings}},
                       where, 1, kEncoderConfigFix);
  check(config.hidden_size % config.num_attention_heads == 0,
        "{}: hidden_size {} is not a multiple of num_attention_heads {}; {}", where,
        config.hidden_size, config.num_attention_heads, kEncoderConfigFix);
  config.layer_norm_eps = positive_float(json, "layer_norm_eps", config.layer_norm_eps, where);
  config.hidden_act = string_field(json, "hidden_act", config.hidden_act, where);
  config.activation = clip_activation_named(config.hidden_act, where);
  config.eos_token_id = non_negative_int(json, "eos_token_id", config.eos_token_id, where);
  return config;
}

ClipTextConfig ClipTextConfig::from_file(const fs::path& config_json) {
  return from_json(read_encoder_config(config_json), config_json.string());
}

}  // namespace mmgen::text_encoders
