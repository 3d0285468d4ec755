// The settings of a WanTransformer3DModel (Wan2.1 / Wan2.2 text-to-video DiT), read from a
// diffusers `transformer/config.json`. Keys a file leaves out take the class defaults of diffusers'
// WanTransformer3DModel (those of the 14B model).
#pragma once

#include <array>
#include <cstdint>
#include <nlohmann/json_fwd.hpp>

#include "core/file.h"

namespace mmgen::dit {

struct WanTransformerConfig {
  std::array<int64_t, 3> patch_size{1, 2, 2};  // (t, h, w)
  int64_t num_attention_heads = 40;
  int64_t attention_head_dim = 128;
  int64_t in_channels = 16;
  int64_t out_channels = 16;
  int64_t text_dim = 4096;
  int64_t freq_dim = 256;
  int64_t ffn_dim = 13824;
  int64_t num_layers = 40;
  bool cross_attn_norm = true;
  float eps = 1e-6f;
  int64_t rope_max_seq_len = 1024;

  int64_t inner_dim() const { return num_attention_heads * attention_head_dim; }
  int64_t patch_volume() const { return patch_size[0] * patch_size[1] * patch_size[2]; }

  // Reads a parsed config.json. Throws Error for settings this implementation does not run
  // (image conditioning, other q/k norms) and for values of the wrong type or out of range.
  // `where` names the file in messages.
  static WanTransformerConfig from_json(const nlohmann::json& json,
                                        const std::string& where = "transformer config.json");
  static WanTransformerConfig from_file(const fs::path& config_json);

  void validate(const std::string& where) const;
};

}  // namespace mmgen::dit
