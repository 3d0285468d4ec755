#include "pipeline/request_checks.h"

#include <fmt/format.h>

#include <algorithm>

#include "core/error.h"

namespace mmgen {

void check_vae_tiles(const Request& request, int64_t factor) {
  if (request.vae_tiling)
    check(request.vae_tile_size % factor == 0 && request.vae_tile_overlap % factor == 0,
          "--vae-tile-size {} / --vae-tile-overlap {}: the VAE tiles its {}x smaller latents, so "
          "both must be multiples of {}",
          request.vae_tile_size, request.vae_tile_overlap, factor, factor);
}

void check_size_multiple(const Request& request, int64_t multiple, const char* model) {
  check(request.height % multiple == 0 && request.width % multiple == 0,
        "--width {} --height {}: {} needs multiples of {}; try --width {} --height {}",
        request.width, request.height, model, multiple,
        std::max(multiple, request.width / multiple * multiple),
        std::max(multiple, request.height / multiple * multiple));
}

int64_t kl_vae_spatial_factor(const ModelIndex& index) {
  const nlohmann::json& config = index.config("vae");
  const int64_t levels =
      config.contains("block_out_channels") && config["block_out_channels"].is_array()
          ? int64_t(config["block_out_channels"].size())
          : 4;
  check(levels >= 1 && levels <= 8, "{}: block_out_channels must list 1 to 8 levels",
        index.component("vae").path.string());
  return int64_t(1) << (levels - 1);
}

bool given(const Request& request, const char* option) {
  return request.given.count(option) > 0;
}

bool has_negative(const Request& request) {
  return !request.negative_prompt.empty() || request.negative_prompt_embeds.has_value();
}

void note_zimage_options(const Request& request, const char* model,
                         std::vector<std::string>& notes) {
  for (const char* option : {"cfg-truncation", "cfg-normalization"})
    if (given(request, option))
      notes.push_back(
          fmt::format("--{} has no effect on {}: only Z-Image reads it", option, model));
}

std::string guidance_of_cfg(const Request& request) {
  return fmt::format("guidance {}", request.guidance_scale);
}

}  // namespace mmgen
