#include "models/vae/autoencoder_kl_config.h"

#include <cmath>
#include <limits>

#include "core/config_fields.h"
#include "core/error.h"
#include "core/json.h"
#include "core/limits.h"
#include "models/vae/tiling.h"
#include "models/vae/vae_config_fields.h"

namespace mmgen::vae {
namespace {

using nlohmann::json;

constexpr const char* kFix = "fix the VAE's config.json";

}  // namespace

AutoencoderKLConfig AutoencoderKLConfig::from_json(const json& config, const std::string& where) {
  check(config.is_object(), "{}: expected a JSON object", where);
  AutoencoderKLConfig result;

  if (config_has(config, "act_fn"))
    check(config["act_fn"] == "silu",
          "{}: \"act_fn\" {} is not implemented; mmgen's AutoencoderKL decoder runs \"silu\" only",
          where, config["act_fn"].dump());
  if (config_has(config, "block_out_channels")) {
    const json& list = config["block_out_channels"];
    check(list.is_array() && !list.empty() && list.size() <= 8,
          "{}: \"block_out_channels\" must list 1 to 8 channel counts, got {}", where, list.dump());
    result.block_out_channels.clear();
    for (const json& item : list) {
      check(item.is_number_integer() && item.get<int64_t>() > 0 &&
                item.get<int64_t>() <= Limits::kMaxConfigInteger,
            "{}: \"block_out_channels\" must hold positive integers, got {}", where, list.dump());
      result.block_out_channels.push_back(item.get<int64_t>());
    }
  }
  if (config_has(config, "up_block_types")) {
    const json& types = config["up_block_types"];
    check(types.is_array() && types.size() == result.block_out_channels.size(),
          "{}: \"up_block_types\" must list one block per block_out_channels entry ({}), got {}",
          where, result.block_out_channels.size(), types.dump());
    for (const json& type : types)
      check(type == "UpDecoderBlock2D",
            "{}: \"up_block_types\" entry {} is not implemented; mmgen's AutoencoderKL decoder "
            "runs \"UpDecoderBlock2D\" only",
            where, type.dump());
  }

  result.layers_per_block =
      vae_integer(config, "layers_per_block", result.layers_per_block, 0, where);
  result.norm_num_groups = vae_integer(config, "norm_num_groups", result.norm_num_groups, 1, where);
  result.latent_channels = vae_integer(config, "latent_channels", result.latent_channels, 1, where);
  result.out_channels = vae_integer(config, "out_channels", result.out_channels, 1, where);
  for (int64_t channels : result.block_out_channels)
    check(channels % result.norm_num_groups == 0,
          "{}: \"norm_num_groups\" {} does not divide block_out_channels entry {}", where,
          result.norm_num_groups, channels);

  result.scaling_factor = config_float(config, "scaling_factor", result.scaling_factor, where,
                                       NumberRule::Finite, kFix);
  check(result.scaling_factor != 0.0f, "{}: \"scaling_factor\" must not be 0", where);
  if (config_has(config, "shift_factor"))
    result.shift_factor =
        config_float(config, "shift_factor", 0.0f, where, NumberRule::Finite, kFix);

  result.use_quant_conv =
      config_boolean(config, "use_quant_conv", result.use_quant_conv, where, kFix);
  result.use_post_quant_conv =
      config_boolean(config, "use_post_quant_conv", result.use_post_quant_conv, where, kFix);
  result.mid_block_add_attention = config_boolean(config, "mid_block_add_attention",
                                                  result.mid_block_add_attention, where, kFix);

  if (config_has(config, "sample_size")) {
    // diffusers allows [height, width] and tiles by the first.
    const json& size = config["sample_size"];
    const json& first = size.is_array() && !size.empty() ? size[0] : size;
    check(first.is_number_integer() && first.get<int64_t>() > 0 &&
              first.get<int64_t>() <= Limits::kMaxConfigInteger,
          "{}: \"sample_size\" must be a positive integer or a list of them, got {}", where,
          size.dump());
    result.sample_size = first.get<int64_t>();
  }
  return result;
}

AutoencoderKLConfig AutoencoderKLConfig::from_file(const fs::path& config_json) {
  return from_json(read_config_file(config_json, "re-download the VAE's config.json"),
                   config_json.string());
}

int64_t AutoencoderKLConfig::tail_radius() const {
  return decoder_tail_radius(int64_t(block_out_channels.size()), layers_per_block + 1);
}

}  // namespace mmgen::vae
