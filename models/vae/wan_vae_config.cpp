#include "models/vae/wan_vae_config.h"

#include <type_traits>

#include "core/config_fields.h"
#include "core/error.h"
#include "core/json.h"
#include "core/limits.h"
#include "models/vae/tiling.h"
#include "models/vae/vae_config_fields.h"

namespace mmgen::vae {
namespace {

using nlohmann::json;

template <typename T>
std::vector<T> number_list(const json& config, const char* key, std::vector<T> fallback,
                           const std::string& where) {
  if (!config_has(config, key)) return fallback;
  const json& value = config[key];
  check(value.is_array(), "{}: \"{}\" must be a list of numbers, got {}", where, key, value.dump());
  std::vector<T> result;
  for (const json& item : value) {
    // An integer list takes whole numbers only: a float such as 1e30 does not convert to one.
    check(std::is_integral_v<T> ? item.is_number_integer() : item.is_number(),
          "{}: \"{}\" must be a list of {}, got {}", where, key,
          std::is_integral_v<T> ? "whole numbers" : "numbers", value.dump());
    result.push_back(item.get<T>());
  }
  return result;
}

}  // namespace

int64_t WanVaeConfig::temporal_factor() const {
  int64_t factor = 1;
  const std::vector<bool> flags = temporal_upsample();
  // Only up blocks that upsample at all (every one but the last) can double time.
  for (size_t i = 0; i + 1 < dim_mult.size() && i < flags.size(); ++i)
    if (flags[i]) factor *= 2;
  return factor;
}

int64_t WanVaeConfig::spatial_factor() const {
  return int64_t(1) << (dim_mult.size() - 1);
}

WanVaeConfig WanVaeConfig::from_json(const json& config, const std::string& where) {
  check(config.is_object(), "{}: expected a JSON object", where);
  WanVaeConfig result;
  if (config_has(config, "_class_name") && config["_class_name"] == "AutoencoderKLQwenImage")
    result.vae_class = WanVaeClass::QwenImage;
  const bool qwen_image = result.vae_class == WanVaeClass::QwenImage;

  // Wan2.2's keys belong to AutoencoderKLWan alone; AutoencoderKLQwenImage ignores them.
  if (!qwen_image && config_has(config, "is_residual")) {
    check(!config_boolean(config, "is_residual", false, where),
          "{}: is_residual = true is the Wan2.2 VAE, which mmgen does not implement yet; use a "
          "Wan2.1 VAE (is_residual false)",
          where);
  }
  if (!qwen_image && config_has(config, "patch_size")) {
    check(config["patch_size"].is_number_integer() && config["patch_size"].get<int64_t>() == 1,
          "{}: patch_size {} is the Wan2.2 patchified VAE, which mmgen does not implement yet; "
          "use a Wan2.1 VAE (patch_size null)",
          where, config["patch_size"].dump());
  }

  result.base_dim = vae_integer(config, "base_dim", result.base_dim, 1, where);
  if (!qwen_image && config_has(config, "decoder_base_dim"))
    result.decoder_base_dim = vae_integer(config, "decoder_base_dim", 0, 1, where);
  result.z_dim = vae_integer(config, "z_dim", result.z_dim, 1, where);
  result.num_res_blocks = vae_integer(config, "num_res_blocks", result.num_res_blocks, 0, where);
  if (qwen_image) {
    // One key for the image's channels: the encoder's input and the decoder's output.
    result.in_channels = vae_integer(config, "input_channels", result.in_channels, 1, where);
    result.out_channels = result.in_channels;
  } else {
    result.in_channels = vae_integer(config, "in_channels", result.in_channels, 1, where);
    result.out_channels = vae_integer(config, "out_channels", result.out_channels, 1, where);
  }

  result.dim_mult = number_list<int64_t>(config, "dim_mult", result.dim_mult, where);
  check(!result.dim_mult.empty() && result.dim_mult.size() <= 8,
        "{}: \"dim_mult\" must list 1 to 8 multipliers", where);
  for (int64_t m : result.dim_mult)
    check(m > 0, "{}: \"dim_mult\" entries must be positive, got {}", where, m);
  result.attn_scales = number_list<double>(config, "attn_scales", result.attn_scales, where);

  if (config_has(config, "temperal_downsample")) {
    const json& flags = config["temperal_downsample"];
    check(flags.is_array(), "{}: \"temperal_downsample\" must be a list of booleans", where);
    result.temperal_downsample.clear();
    for (const json& flag : flags) {
      check(flag.is_boolean(), "{}: \"temperal_downsample\" must be a list of booleans, got {}",
            where, flags.dump());
      result.temperal_downsample.push_back(flag.get<bool>());
    }
  }
  check(result.temperal_downsample.size() + 1 == result.dim_mult.size(),
        "{}: \"temperal_downsample\" has {} entries but dim_mult has {}; it needs one fewer", where,
        result.temperal_downsample.size(), result.dim_mult.size());

  result.latents_mean = number_list<float>(config, "latents_mean", result.latents_mean, where);
  result.latents_std = number_list<float>(config, "latents_std", result.latents_std, where);
  check(int64_t(result.latents_mean.size()) == result.z_dim &&
            int64_t(result.latents_std.size()) == result.z_dim,
        "{}: latents_mean and latents_std need z_dim = {} values each, got {} and {}", where,
        result.z_dim, result.latents_mean.size(), result.latents_std.size());
  for (float s : result.latents_std)
    check(s != 0.0f, "{}: latents_std contains 0, which cannot de-normalise latents", where);

  if (qwen_image) {
    // No such keys: diffusers' spatial ratio is 2^len(temperal_downsample), what the up blocks
    // give; the temporal one is what the flags give (Qwen-Image decodes one frame).
    result.scale_factor_temporal = result.temporal_factor();
    result.scale_factor_spatial = result.spatial_factor();
    return result;
  }
  result.scale_factor_temporal =
      vae_integer(config, "scale_factor_temporal", result.scale_factor_temporal, 1, where);
  result.scale_factor_spatial =
      vae_integer(config, "scale_factor_spatial", result.scale_factor_spatial, 1, where);
  check(result.scale_factor_spatial == result.spatial_factor(),
        "{}: scale_factor_spatial {} disagrees with the {} up blocks of dim_mult (which give {})",
        where, result.scale_factor_spatial, result.dim_mult.size(), result.spatial_factor());
  check(result.scale_factor_temporal == result.temporal_factor(),
        "{}: scale_factor_temporal {} disagrees with temperal_downsample (which gives {})", where,
        result.scale_factor_temporal, result.temporal_factor());
  return result;
}

WanVaeConfig WanVaeConfig::from_file(const fs::path& config_json) {
  return from_json(read_config_file(config_json, "re-download the VAE's config.json"),
                   config_json.string());
}

int64_t WanVaeConfig::tail_radius() const {
  // Each up block holds num_res_blocks + 1 residual blocks.
  return decoder_tail_radius(int64_t(dim_mult.size()), num_res_blocks + 1);
}

}  // namespace mmgen::vae
