// The settings of a ZImageTransformer2DModel (Z-Image's single-stream DiT), read from a diffusers
// `transformer/config.json`. Keys a file leaves out take diffusers' class defaults (those of
// Z-Image-Turbo, 6.15B).
#pragma once

#include <array>
#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <string>

#include "core/file.h"

namespace mmgen::dit {

struct ZImageConfig {
  // diffusers holds lists of patch sizes (one embedder and final layer per pair); every released
  // checkpoint has one pair, and that is the one this model runs.
  int64_t patch_size = 2;    // height and width
  int64_t f_patch_size = 1;  // frames
  int64_t in_channels = 16;  // also the output channels
  int64_t dim = 3840;
  int64_t n_layers = 30;
  int64_t n_refiner_layers = 2;
  int64_t n_heads = 30;
  // Read and range-checked only: diffusers builds its attention with n_heads for q, k and v alike
  // (the weights are [dim, dim]), so this value changes nothing there and nothing here.
  int64_t n_kv_heads = 30;
  float norm_eps = 1e-5f;
  int64_t cap_feat_dim = 2560;
  double rope_theta = 256.0;
  float t_scale = 1000.0f;
  std::array<int64_t, 3> axes_dims{32, 48, 48};      // RoPE channels per axis (sum = head_dim)
  std::array<int64_t, 3> axes_lens{1024, 512, 512};  // positions each axis's table covers

  int64_t head_dim() const { return dim / n_heads; }
  // Width of the timestep embedding every modulation reads (diffusers' min(dim, 256)).
  int64_t adaln_dim() const { return dim < 256 ? dim : 256; }
  // SwiGLU hidden width: diffusers' int(dim / 3 * 8), in double like Python's float division.
  int64_t ffn_dim() const { return int64_t(double(dim) / 3.0 * 8.0); }
  int64_t patch_values() const { return f_patch_size * patch_size * patch_size * in_channels; }

  // Reads a parsed config.json. Throws Error, in one line naming the key and `where`, for values
  // this implementation does not run (several patch sizes, SigLIP conditioning, no q/k norm) and
  // for values of the wrong type or out of range.
  static ZImageConfig from_json(const nlohmann::json& json,
                                const std::string& where = "transformer config.json");
  static ZImageConfig from_file(const fs::path& config_json);

  void validate(const std::string& where) const;
};

}  // namespace mmgen::dit
