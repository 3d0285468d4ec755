// The hyper-parameters of diffusers' FluxTransformer2DModel (FLUX.1 dev and schnell), read from
// its config.json. Keys left out take diffusers' defaults, which are FLUX.1's sizes.
#pragma once

#include <array>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "core/file.h"

namespace mmgen::dit {

struct FluxConfig {
  int64_t patch_size = 1;          // FLUX packs 2x2 latent patches itself; the model sees 1
  int64_t in_channels = 64;        // a packed token: 16 latent channels x 2 x 2
  int64_t out_channels = 64;       // null in the file: in_channels
  int64_t num_layers = 19;         // double-stream blocks
  int64_t num_single_layers = 38;  // single-stream blocks
  int64_t attention_head_dim = 128;
  int64_t num_attention_heads = 24;
  int64_t joint_attention_dim = 4096;   // the T5 encoder's width
  int64_t pooled_projection_dim = 768;  // CLIP's pooled width
  bool guidance_embeds = false;         // dev: true (guidance-distilled), schnell: false
  std::array<int64_t, 3> axes_dims_rope = {16, 56, 56};
  // FluxPosEmbed's theta, fixed in diffusers (not a config key).
  double rope_theta = 10000.0;

  int64_t dim() const { return num_attention_heads * attention_head_dim; }
  int64_t mlp_dim() const { return 4 * dim(); }  // mlp_ratio 4 in both block kinds
  int64_t out_values() const { return patch_size * patch_size * out_channels; }

  // Throws Error naming `where` when a size is zero or the RoPE axes do not cover a head.
  void validate(const std::string& where) const;
  static FluxConfig from_json(const nlohmann::json& config, const std::string& where);
  static FluxConfig from_file(const fs::path& config_json);
};

}  // namespace mmgen::dit
