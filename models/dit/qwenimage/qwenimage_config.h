// The hyper-parameters of diffusers' QwenImageTransformer2DModel (Qwen-Image), read from its
// config.json. Keys left out take diffusers' defaults, which are Qwen-Image's sizes.
#pragma once

#include <array>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "core/file.h"

namespace mmgen::dit {

struct QwenImageConfig {
  // The pipeline packs 2x2 latent patches into a token (as FLUX); patch_size sizes proj_out.
  int64_t patch_size = 2;
  int64_t in_channels = 64;   // a packed token: 16 latent channels x 2 x 2
  int64_t out_channels = 16;  // per latent position; proj_out writes patch_size² of them
  int64_t num_layers = 60;    // double-stream blocks (the model has no single-stream ones)
  int64_t attention_head_dim = 128;
  int64_t num_attention_heads = 24;
  int64_t joint_attention_dim = 3584;  // Qwen2.5-VL-7B's hidden size
  std::array<int64_t, 3> axes_dims_rope = {16, 56, 56};
  // QwenEmbedRope's theta and table length, fixed in diffusers (not config keys): positions
  // run over [-4096, 4096).
  double rope_theta = 10000.0;
  int64_t rope_positions = 4096;

  int64_t dim() const { return num_attention_heads * attention_head_dim; }
  int64_t mlp_dim() const { return 4 * dim(); }  // FeedForward's mult 4
  int64_t out_values() const { return patch_size * patch_size * out_channels; }

  // Throws Error naming `where` when a size is zero or the RoPE axes do not cover a head.
  void validate(const std::string& where) const;
  // Refuses, in one line, the variants this class does not run (zero_cond_t, additional t
  // conditioning, layered 3D RoPE: Qwen-Image-Edit-2511 and Qwen-Image-Layered).
  static QwenImageConfig from_json(const nlohmann::json& config, const std::string& where);
  static QwenImageConfig from_file(const fs::path& config_json);
};

}  // namespace mmgen::dit
