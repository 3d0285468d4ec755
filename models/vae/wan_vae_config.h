// The hyper-parameters of a Wan2.1 video VAE (diffusers' AutoencoderKLWan), read from the
// component's `config.json`; also those of Qwen-Image's VAE (AutoencoderKLQwenImage), which is the
// same network.
//
// AutoencoderKLQwenImage (diffusers 0.42.1) against AutoencoderKLWan, line by line:
//  - identical: the weight names (post_quant_conv, decoder.conv_in, decoder.mid_block.{resnets,
//    attentions}, decoder.up_blocks.i.{resnets.j, upsamplers.0}, decoder.norm_out.gamma,
//    decoder.conv_out), the decoder's structure (WanRMS_norm, residual blocks, the one mid-block
//    attention, no attention from attn_scales, upsamplers halving the channels, the "Rep" rule),
//    the per-frame decode with its feature cache, the clamp to [-1, 1] in decode, the defaults
//    (base_dim 96, z_dim 16, dim_mult, num_res_blocks 2, temperal_downsample, latents_mean/std)
//    and the pipeline's de-normalisation (latents / (1 / std) + mean per channel).
//  - config keys: Qwen-Image has one `input_channels` (the encoder's input and the decoder's
//    conv_out) where Wan has `in_channels` and `out_channels`; it has no `scale_factor_spatial` /
//    `scale_factor_temporal` (its compression is 2^len(temperal_downsample), the same number the
//    architecture gives) and none of Wan2.2's `decoder_base_dim`, `is_residual`, `patch_size`
//    (diffusers ignores such keys in its config, so we do not read them there).
//  - the caches keep x[:, :, -min(2, T):] where Wan keeps x[:, :, -2:]: the same frames.
//  - diffusers' tiled_decode of Qwen-Image does not clamp (Wan's does); the image processor clamps
//    after it, so the picture is the same. Neither decoder passes `first_chunk` for Wan2.1 blocks.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "core/file.h"

namespace mmgen::vae {

// Which diffusers class the config.json names (`_class_name`): they read different keys.
enum class WanVaeClass { Wan, QwenImage };

struct WanVaeConfig {
  WanVaeClass vae_class = WanVaeClass::Wan;
  int64_t base_dim = 96;
  std::optional<int64_t> decoder_base_dim;  // null: the decoder uses base_dim
  int64_t z_dim = 16;
  std::vector<int64_t> dim_mult = {1, 2, 4, 4};
  int64_t num_res_blocks = 2;
  // Kept for completeness: diffusers' Wan decoder builds no attention from it (only the mid
  // block has attention), so neither do we.
  std::vector<double> attn_scales;
  std::vector<bool> temperal_downsample = {false, true, true};  // (sic) diffusers' spelling
  std::vector<float> latents_mean = {-0.7571f, -0.7089f, -0.9113f, 0.1075f,  -0.1745f, 0.9653f,
                                     -0.1517f, 1.5508f,  0.4134f,  -0.0715f, 0.5517f,  -0.3632f,
                                     -0.1922f, -0.9497f, 0.2503f,  -0.2921f};
  std::vector<float> latents_std = {2.8184f, 1.4541f, 2.3275f, 2.6558f, 1.2196f, 1.7708f,
                                    2.6052f, 2.0743f, 3.2687f, 2.1526f, 2.8652f, 1.5579f,
                                    1.6382f, 1.1253f, 2.8251f, 1.9160f};
  int64_t in_channels = 3;
  int64_t out_channels = 3;
  int64_t scale_factor_temporal = 4;
  int64_t scale_factor_spatial = 8;

  int64_t decoder_dim() const { return decoder_base_dim.value_or(base_dim); }
  // The decoder doubles time in the up blocks whose flag (reversed temperal_downsample) is set.
  std::vector<bool> temporal_upsample() const {
    return std::vector<bool>(temperal_downsample.rbegin(), temperal_downsample.rend());
  }
  int64_t temporal_factor() const;  // 2^(number of temporal upsamples)
  int64_t spatial_factor() const;   // 2^(len(dim_mult) - 1)
  // Output frames for `latent_frames` latent frames: 1 + temporal_factor · (T − 1).
  int64_t output_frames(int64_t latent_frames) const {
    return 1 + temporal_factor() * (latent_frames - 1);
  }

  // Latent pixels of context that the decoder's up blocks, norm_out and conv_out reach (every
  // 3x3 convolution widens the reach by a pixel at its scale), rounded up, plus one for the
  // nearest-neighbour upsampling's rounding: tiles decoded with this halo are exact inside.
  int64_t tail_radius() const;

  // Keys left out take diffusers' AutoencoderKLWan defaults. Wan2.2 features (is_residual,
  // patch_size > 1) are refused. `_class_name` "AutoencoderKLQwenImage" reads that class's keys
  // instead (see the top of this file). `where` names the source in error messages.
  static WanVaeConfig from_json(const nlohmann::json& json,
                                const std::string& where = "config.json");
  static WanVaeConfig from_file(const fs::path& config_json);
};

}  // namespace mmgen::vae
