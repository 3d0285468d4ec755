#include "models/text_encoders/clip_config.h"

#include "core/error.h"
#include "core/json.h"
#include "core/limits.h"
#include "models/text_encoders/encoder_config_fields.h"

namespace mmgen::text_encoders {
namespace {

constexpr const char* kFix = "fix the text encoder's config.json";

ClipActivation activation_named(const std::string& name, const std::string& where) {
  if (name == "quick_gelu") return ClipActivation::QuickGelu;
  if (name == "gelu") return ClipActivation::Gelu;
  if (name == "gelu_new" || name == "gelu_pytorch_tanh") return ClipActivation::GeluTanh;
  fail("{}: hidden_act \"{}\" is not supported for CLIP (use quick_gelu, gelu or gelu_new)", where,
       name);
}

}  // namespace

ClipTextConfig ClipTextConfig::from_json(const nlohmann::json& root, const std::string& where) {
  check(root.is_object(), "{}: expected a JSON object", where);
  std::string model_type = "clip_text_model";
  if (root.contains("model_type")) {
    check(root["model_type"].is_string(), "{}: \"model_type\" must be a string", where);
    model_type = root["model_type"].get<std::string>();
  }
  // A whole CLIPModel's config keeps the text encoder's under text_config.
  const bool whole = model_type == "clip" && root.contains("text_config");
  check(model_type == "clip_text_model" || whole,
        "{}: model_type \"{}\" is not a CLIP text encoder (expected \"clip_text_model\")", where,
        model_type);
  const nlohmann::json& json = whole ? root["text_config"] : root;
  check(json.is_object(), "{}: \"text_config\" must be an object", where);

  ClipTextConfig config;
  config.vocab_size = positive_int(json, "vocab_size", config.vocab_size, where);
  config.hidden_size = positive_int(json, "hidden_size", config.hidden_size, where);
  config.intermediate_size =
      positive_int(json, "intermediate_size", config.intermediate_size, where);
  config.num_hidden_layers =
      positive_int(json, "num_hidden_layers", config.num_hidden_layers, where);
  config.num_attention_heads =
      positive_int(json, "num_attention_heads", config.num_attention_heads, where);
  config.max_position_embeddings =
      positive_int(json, "max_position_embeddings", config.max_position_embeddings, where);
  check(config.hidden_size % config.num_attention_heads == 0,
        "{}: hidden_size {} is not a multiple of num_attention_heads {}; {}", where,
        config.hidden_size, config.num_attention_heads, kFix);
  if (json.contains("layer_norm_eps") && !json["layer_norm_eps"].is_null()) {
    check(json["layer_norm_eps"].is_number() && json["layer_norm_eps"].get<double>() > 0,
          "{}: \"layer_norm_eps\" must be a positive number; {}", where, kFix);
    config.layer_norm_eps = json["layer_norm_eps"].get<float>();
  }
  if (json.contains("hidden_act") && !json["hidden_act"].is_null()) {
    check(json["hidden_act"].is_string(), "{}: \"hidden_act\" must be a string; {}", where, kFix);
    config.hidden_act = json["hidden_act"].get<std::string>();
  }
  config.activation = activation_named(config.hidden_act, where);
  if (json.contains("eos_token_id") && !json["eos_token_id"].is_null()) {
    check(json["eos_token_id"].is_number_integer() && json["eos_token_id"].get<int64_t>() >= 0,
          "{}: \"eos_token_id\" must be a non-negative integer; {}", where, kFix);
    config.eos_token_id = json["eos_token_id"].get<int64_t>();
  }
  return config;
}

ClipTextConfig ClipTextConfig::from_file(const fs::path& config_json) {
  return from_json(parse_json(read_text_file(config_json), config_json.string(),
                              "re-download the text encoder's config.json"),
                   config_json.string());
}

}  // namespace mmgen::text_encoders
