#include "models/text_encoders/qwen3_config.h"

#include "core/error.h"
#include "core/json.h"
#include "core/limits.h"
#include "models/text_encoders/encoder_config_fields.h"

namespace mmgen::text_encoders {
namespace {

using json = nlohmann::json;

// The RoPE parameters object: `rope_parameters` (v5) or `rope_scaling` (v4), empty when neither.
json rope_parameters(const json& object, const std::string& where) {
  if (config_has(object, "rope_parameters")) {
    check(object["rope_parameters"].is_object(), "{}: \"rope_parameters\" must be an object",
          where);
    return object["rope_parameters"];
  }
  if (config_has(object, "rope_scaling")) {
    check(object["rope_scaling"].is_object(), "{}: \"rope_scaling\" must be an object or null",
          where);
    return object["rope_scaling"];
  }
  return json::object();
}

// transformers keeps RoPE settings in `rope_parameters` (v5) or in top-level `rope_theta` plus
// `rope_scaling` (v4 configs); both spellings are read, the newer one first. Qwen2.5-VL's v4
// configs name their multimodal RoPE type "mrope", which transformers reads as "default".
void read_rope(const json& object, Qwen3Config& config, const std::string& where) {
  const json parameters = rope_parameters(object, where);
  config.rope_theta = positive_number(object, "rope_theta", config.rope_theta, where);
  config.rope_theta = positive_number(parameters, "rope_theta", config.rope_theta, where);

  std::string type = "default";
  for (const char* key : {"rope_type", "type"})
    if (config_has(parameters, key)) {
      check(parameters[key].is_string(), "{}: RoPE \"{}\" must be a string", where, key);
      type = parameters[key].get<std::string>();
      break;
    }
  if (type == "mrope" && config.model_type == "qwen2_5_vl") type = "default";
  check(type == "default" || type == "linear",
        "{}: RoPE type \"{}\" is not supported (supported: default, linear); use a checkpoint "
        "without that rope scaling",
        where, type);
  config.rope_type = type;
  config.rope_factor = type == "linear" ? positive_number(parameters, "factor", 1.0, where) : 1.0;
  const double partial =
      positive_number(parameters, "partial_rotary_factor",
                      positive_number(object, "partial_rotary_factor", 1.0, where), where);
  check(partial == 1.0, "{}: partial_rotary_factor {} is not supported by Qwen3 (expected 1.0)",
        where, partial);
}

// Qwen2.5-VL's multimodal RoPE splits the head_dim / 2 frequencies into mrope_section's three
// parts and takes part i's angles from position stream i % 3 (temporal, height, width;
// transformers' Qwen2_5_VLRotaryEmbedding.recomposition_frequencies). A text-only prompt gets
// the same positions in all three streams (Qwen2_5_VLTextModel.forward expands one arange to
// 3 x batch x tokens; get_rope_index only runs with image or video grids), so every part reads
// the same angles and it is ordinary 1-D RoPE: nothing to do here beyond checking that the
// sections fit head_dim, as transformers' split needs.
void read_mrope(const json& object, const Qwen3Config& config, const std::string& where) {
  const json parameters = rope_parameters(object, where);
  std::vector<int64_t> sections = {16, 24, 24};  // transformers' default
  if (config_has(parameters, "mrope_section")) {
    const json& value = parameters["mrope_section"];
    check(value.is_array() && value.size() == 3,
          "{}: \"mrope_section\" must list 3 section sizes, got {}", where, value.dump());
    sections.clear();
    for (const json& part : value) {
      check(part.is_number_integer() && part.get<int64_t>() > 0,
            "{}: \"mrope_section\" must hold positive integers, got {}", where, value.dump());
      sections.push_back(part.get<int64_t>());
    }
  }
  const int64_t sum = sections[0] + sections[1] + sections[2];
  check(sum * 2 == config.head_dim,
        "{}: mrope_section [{}, {}, {}] sums to {}, but head_dim {} (hidden_size / "
        "num_attention_heads) needs {}; fix the text encoder's config.json",
        where, sections[0], sections[1], sections[2], sum, config.head_dim, config.head_dim / 2);
}

// transformers' Qwen3Config.__post_init__: the window applies only with use_sliding_window, and
// layer_types (when absent) makes layers from max_window_layers on sliding.
void read_windows(const json& object, Qwen3Config& config, const std::string& where) {
  const bool use_window = boolean(object, "use_sliding_window", false, where);
  const int64_t window = use_window ? positive_int(object, "sliding_window", 4096, where) : 0;
  const int64_t max_window_layers = non_negative_int(
      object, "max_window_layers", config.model_type == "qwen2_5_vl" ? 80 : 28, where);
  config.layer_windows.assign(size_t(config.num_hidden_layers), 0);
  if (config_has(object, "layer_types")) {
    const json& types = object["layer_types"];
    check(types.is_array() && int64_t(types.size()) == config.num_hidden_layers,
          "{}: \"layer_types\" must list one type per layer ({})", where, config.num_hidden_layers);
    for (size_t i = 0; i < types.size(); ++i) {
      const std::string type = types[i].is_string() ? types[i].get<std::string>() : "";
      check(type == "full_attention" || type == "sliding_attention",
            "{}: layer_types[{}] is {}; expected \"full_attention\" or \"sliding_attention\"",
            where, i, types[i].dump());
      if (type == "sliding_attention") {
        check(window > 0,
              "{}: layer_types[{}] is sliding_attention but use_sliding_window is off or "
              "sliding_window is unset",
              where, i);
        config.layer_windows[i] = window;
      }
    }
    return;
  }
  if (window > 0)
    for (int64_t i = max_window_layers; i < config.num_hidden_layers; ++i)
      config.layer_windows[size_t(i)] = window;
}

// SGLang's dual_chunk_attention_config with its defaults (chunk_size 8192, local_size 1024,
// original_max_position_embeddings 0). Its sparse settings (MInference patterns for prompts above
// sparse_attention_threshold tokens, an approximation) are not read: the dense path runs always.
void read_dual_chunk(const json& object, Qwen3Config& config, const std::string& where) {
  if (!config_has(object, "dual_chunk_attention_config")) return;
  const json& dca = object["dual_chunk_attention_config"];
  const std::string at = where + " dual_chunk_attention_config";
  check(dca.is_object(), "{} must be an object, got {}", at, dca.dump());
  config.dual_chunk.chunk_size = positive_int(dca, "chunk_size", 8192, at);
  config.dual_chunk.local_size = non_negative_int(dca, "local_size", 1024, at);
  config.dual_chunk.original_max_position_embeddings =
      non_negative_int(dca, "original_max_position_embeddings", 0, at);
  check(config.dual_chunk.local_size < config.dual_chunk.chunk_size,
        "{}: local_size {} must be below chunk_size {}; fix the text encoder's config.json", at,
        config.dual_chunk.local_size, config.dual_chunk.chunk_size);
  check(config.rope_type == "default",
        "{}: dual chunk attention replaces the RoPE scaling \"{}\"; use one or the other", at,
        config.rope_type);
  for (int64_t window : config.layer_windows)
    check(window == 0,
          "{}: dual chunk attention with sliding-window layers is not supported (as in SGLang); "
          "turn use_sliding_window off",
          at);
}

// The decoder's keys, on top of `config`'s defaults (Qwen3's, or Qwen2.5-VL's text model's).
Qwen3Config read_decoder(const json& object, Qwen3Config config, const std::string& where) {
  if (config_has(object, "hidden_act")) {
    const json& act = object["hidden_act"];
    check(
        act.is_string() && (act.get<std::string>() == "silu" || act.get<std::string>() == "swish"),
        "{}: hidden_act {} is not supported (Qwen3 uses \"silu\")", where, act.dump());
  }
  const bool vl = config.model_type == "qwen2_5_vl";
  read_config_integers(object,
                       {{"vocab_size", config.vocab_size},
                        {"hidden_size", config.hidden_size},
                        {"intermediate_size", config.intermediate_size},
                        {"num_hidden_layers", config.num_hidden_layers},
                        {"num_attention_heads", config.num_attention_heads}},
                       where, 1, kEncoderConfigFix);
  config.num_key_value_heads =
      positive_int(object, "num_key_value_heads",
                   vl ? config.num_key_value_heads : config.num_attention_heads, where);
  if (vl) {
    // Qwen2_5_VLAttention takes head_dim = hidden_size / num_attention_heads, whatever the file
    // says.
    check(config.hidden_size % config.num_attention_heads == 0,
          "{}: hidden_size {} is not a multiple of num_attention_heads {}", where,
          config.hidden_size, config.num_attention_heads);
    config.head_dim = config.hidden_size / config.num_attention_heads;
  } else {
    config.head_dim = positive_int(object, "head_dim", config.head_dim, where);
  }
  config.max_position_embeddings =
      positive_int(object, "max_position_embeddings", config.max_position_embeddings, where);
  config.rms_norm_eps = positive_float(object, "rms_norm_eps", config.rms_norm_eps, where);
  config.tie_word_embeddings =
      boolean(object, "tie_word_embeddings", config.tie_word_embeddings, where);
  if (!vl) config.attention_bias = boolean(object, "attention_bias", config.attention_bias, where);
  check(config.num_attention_heads % config.num_key_value_heads == 0,
        "{}: num_attention_heads {} is not a multiple of num_key_value_heads {}", where,
        config.num_attention_heads, config.num_key_value_heads);
  check(config.head_dim % 2 == 0, "{}: head_dim {} must be even for RoPE", where, config.head_dim);
  read_rope(object, config, where);
  if (vl) read_mrope(object, config, where);
  read_windows(object, config, where);
  read_dual_chunk(object, config, where);
  return config;
}

// transformers' Qwen2_5_VLTextConfig defaults (v5).
Qwen3Config qwen2_5_vl_defaults() {
  Qwen3Config config;
  config.model_type = "qwen2_5_vl";
  config.vocab_size = 152064;
  config.hidden_size = 8192;
  config.intermediate_size = 29568;
  config.num_hidden_layers = 80;
  config.num_attention_heads = 64;
  config.num_key_value_heads = 8;
  config.rms_norm_eps = 1e-5f;
  config.rope_theta = 1e6;
  config.qkv_bias = true;
  config.qk_norm = false;
  return config;
}

}  // namespace

Qwen3Config Qwen3Config::from_json(const json& object, const std::string& where) {
  check(object.is_object(), "{}: expected a JSON object", where);
  std::string type = "qwen3";
  if (config_has(object, "model_type")) {
    const json& value = object["model_type"];
    check(value.is_string() &&
              (value.get<std::string>() == "qwen3" || value.get<std::string>() == "qwen2_5_vl" ||
               value.get<std::string>() == "qwen2_5_vl_text"),
          "{}: model_type {} is not a Qwen3 text model (expected \"qwen3\", or \"qwen2_5_vl\" "
          "for Qwen2.5-VL's language model)",
          where, value.dump());
    type = value.get<std::string>();
  }
  if (type == "qwen3") return read_decoder(object, Qwen3Config{}, where);
  // Qwen2.5-VL: transformers 5 writes the language model's keys under "text_config" and
  // tie_word_embeddings at the top; v4 configs keep them all at the top (and may repeat them in
  // "text_config", which then wins, as in transformers).
  const json* text = &object;
  if (type == "qwen2_5_vl" && config_has(object, "text_config")) {
    check(object["text_config"].is_object(), "{}: \"text_config\" must be an object", where);
    text = &object["text_config"];
  }
  Qwen3Config config = read_decoder(*text, qwen2_5_vl_defaults(), where);
  config.tie_word_embeddings =
      config.tie_word_embeddings || boolean(object, "tie_word_embeddings", false, where);
  return config;
}

Qwen3Config Qwen3Config::from_file(const fs::path& config_json) {
  return from_json(read_encoder_config(config_json), config_json.string());
}

}  // namespace mmgen::text_encoders
