#include "attention/backends/sliding_tile_attn/sta_settings.h"

#include <string>
#include <utility>

#include "core/error.h"

namespace mmgen::attention::sliding_tile_attn {

Settings Settings::from(const nlohmann::json& settings, const BackendResources& resources) {
  const std::string mode = settings.at("sta_mode").get<std::string>();
  check(mode == "STA_inference",
        "sliding_tile_attn: sta_mode={} (mask search and tuning) is not available; use "
        "sta_mode=STA_inference with a mask_strategy_file_path",
        mode);
  Settings result;
  const auto& tile = settings.at("tile_size");
  for (size_t a = 0; a < 3; ++a) result.tile[a] = tile.at(a).get<int64_t>();
  result.skip_time_steps = settings.at("skip_time_steps").get<int64_t>();
  if (resources.sta_mask) {
    result.mask = resources.sta_mask;
  } else {
    const auto path = settings.find("mask_strategy_file_path");
    check(path != settings.end() && path->is_string(),
          "sliding_tile_attn: needs mask_strategy_file_path (a JSON file of \"step_layer_head\": "
          "[wt, wh, ww] windows); add mask_strategy_file_path=FILE to --attention-backend-config");
    result.mask =
        std::make_shared<const StaMaskStrategy>(StaMaskStrategy::load(path->get<std::string>()));
  }
  return result;
}

void load_resources(const nlohmann::json& settings, int64_t steps,
                    const std::vector<ResourceUse>& uses, BackendResources& resources) {
  const auto path = settings.find("mask_strategy_file_path");
  if (settings.at("sta_mode") != "STA_inference" || path == settings.end() || !path->is_string())
    return;
  auto mask =
      std::make_shared<const StaMaskStrategy>(StaMaskStrategy::load(path->get<std::string>()));
  for (const ResourceUse& use : uses) {
    check(use.layers > 0 && use.heads > 0,
          "{}: sliding_tile_attn needs num_layers and num_attention_heads in {}'s config to check "
          "the mask strategy",
          use.where, use.component);
    mask->check(steps, use.layers, use.heads, settings.at("skip_time_steps").get<int64_t>());
  }
  resources.sta_mask = std::move(mask);
}

}  // namespace mmgen::attention::sliding_tile_attn
