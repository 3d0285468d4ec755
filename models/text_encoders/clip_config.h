// The hyper-parameters of a CLIP text encoder (transformers' CLIPTextConfig), read from a
// CLIPTextModel's config.json (or the text_config of a whole CLIPModel's).
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "core/file.h"

namespace mmgen::text_encoders {

// transformers' ACT2FN names a CLIP MLP uses.
enum class ClipActivation {
  QuickGelu,  // x·sigmoid(1.702·x): OpenAI's CLIP (CLIP-L, FLUX.1's text_encoder)
  Gelu,       // exact erf GELU (OpenCLIP's bigG)
  GeluTanh,   // gelu_new / gelu_pytorch_tanh
};

struct ClipTextConfig {
  int64_t vocab_size = 49408;
  int64_t hidden_size = 512;
  int64_t intermediate_size = 2048;
  int64_t num_hidden_layers = 12;
  int64_t num_attention_heads = 8;
  int64_t max_position_embeddings = 77;
  float layer_norm_eps = 1e-5f;
  std::string hidden_act = "quick_gelu";
  ClipActivation activation = ClipActivation::QuickGelu;
  int64_t eos_token_id = 49407;

  int64_t head_dim() const { return hidden_size / num_attention_heads; }
  // transformers' legacy pooling: configs saved with eos_token_id 2 (CLIP-L among them) pool at
  // argmax(input_ids), the highest id being <|endoftext|>; others at the first eos_token_id.
  bool pools_at_argmax() const { return eos_token_id == 2; }

  // Keys left out take CLIPTextConfig's defaults. `where` names the source in error messages.
  static ClipTextConfig from_json(const nlohmann::json& json,
                                  const std::string& where = "config.json");
  static ClipTextConfig from_file(const fs::path& config_json);
};

}  // namespace mmgen::text_encoders
