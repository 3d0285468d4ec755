// The hyper-parameters of diffusers' AutoencoderKL (the 2-D image VAE of SD, FLUX and Z-Image) that
// its decoder and the pipelines' de-normalisation read, from the component's `config.json`.
// Encoder-only keys (in_channels, down_block_types, use_quant_conv) are accepted and not used.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "core/file.h"

namespace mmgen::vae {

struct AutoencoderKLConfig {
  // Channels of each resolution level, highest resolution first; the decoder walks them reversed.
  std::vector<int64_t> block_out_channels = {64};
  int64_t layers_per_block = 1;  // the decoder's up blocks hold layers_per_block + 1 resnets
  int64_t norm_num_groups = 32;
  int64_t latent_channels = 4;
  int64_t out_channels = 3;
  float scaling_factor = 0.18215f;
  std::optional<float> shift_factor;  // null in SD's VAE; FLUX and Z-Image set it
  bool use_quant_conv = true;
  bool use_post_quant_conv = true;
  bool mid_block_add_attention = true;
  int64_t sample_size = 32;  // pixels; diffusers' tiling threshold, kept for a tiled decode

  // Output pixels per latent pixel: each up block but the last doubles the resolution.
  int64_t spatial_factor() const { return int64_t(1) << (block_out_channels.size() - 1); }
  // Latent pixels of context that the decoder's up blocks (layers_per_block + 1 resnets each),
  // norm_out and conv_out reach (models/vae/tiling.h's decoder_tail_radius): the halo of a tiled
  // decode.
  int64_t tail_radius() const;

  // Keys left out take diffusers' AutoencoderKL defaults. Anything the decoder does not implement
  // (an activation other than silu, up blocks other than UpDecoderBlock2D) is refused in one line
  // naming the key and `where`.
  static AutoencoderKLConfig from_json(const nlohmann::json& json,
                                       const std::string& where = "config.json");
  static AutoencoderKLConfig from_file(const fs::path& config_json);
};

}  // namespace mmgen::vae
