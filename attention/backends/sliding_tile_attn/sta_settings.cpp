#include "attention/backends/sliding_tile_attn/sta_settings.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <string>
#include <system_error>
#include <utility>

#include "core/error.h"

namespace mmgen::attention::sliding_tile_attn {

namespace {

using json = nlohmann::json;

bool has_string(const json& settings, const char* key) {
  const auto it = settings.find(key);
  return it != settings.end() && it->is_string();
}

StaWindow window_size_of(const json& settings) {
  const auto& size = settings.at("window_size");
  return {size.at(0).get<int32_t>(), size.at(1).get<int32_t>(), size.at(2).get<int32_t>()};
}

// The search's output must be writable before the run spends its time: a probe file beside it is
// created and removed (the dry run too, so both refuse the same folders).
void check_writable(const fs::path& output) {
  check(!fs::is_directory(output),
        "sliding_tile_attn: mask_search_output '{}' is a folder; give the file to write",
        output.string());
  const fs::path folder = output.parent_path().empty() ? fs::path(".") : output.parent_path();
  check(fs::is_directory(folder), "sliding_tile_attn: mask_search_output '{}': no such folder '{}'",
        output.string(), folder.string());
  const fs::path probe = folder / fmt::format(".mmgen-probe-{}", ::getpid());
  const bool writable = bool(std::ofstream(probe));
  std::error_code ignored;
  fs::remove(probe, ignored);
  check(writable, "sliding_tile_attn: mask_search_output '{}': the folder '{}' is not writable",
        output.string(), folder.string());
}

std::string steps_text(int64_t first, int64_t last) {
  return first == last ? fmt::format("step {}", first) : fmt::format("steps {}..{}", first, last);
}

}  // namespace

std::optional<StaWindow> Settings::window(int64_t step, int64_t layer, int64_t head) const {
  if (!mask) return window_size;
  return mask->window(step, layer, head);
}

void check_settings(const json& settings, int64_t steps) {
  const std::string mode = settings.at("sta_mode").get<std::string>();
  check(mode == "STA_inference" || mode == "STA_searching",
        "sliding_tile_attn: sta_mode={} (averaging searches over prompts) is not available; "
        "sta_mode=STA_searching with mask_search_output=FILE writes a mask file, and "
        "STA_inference runs it",
        mode);
  const bool searching = mode == "STA_searching";
  check(!searching || !has_string(settings, "mask_strategy_file_path"),
        "sliding_tile_attn: sta_mode=STA_searching runs full attention and writes "
        "mask_search_output; it reads no mask_strategy_file_path (that is for STA_inference): "
        "drop one of them");
  check(searching || !has_string(settings, "mask_search_output"),
        "sliding_tile_attn: mask_search_output is written by sta_mode=STA_searching only; add "
        "sta_mode=STA_searching to search, or drop mask_search_output");
  if (!searching) return;
  // validate_backend_config's required_when says this already; kept for callers that skip it.
  check(has_string(settings, "mask_search_output"),
        "sliding_tile_attn: sta_mode=STA_searching needs mask_search_output=FILE, the mask file "
        "it writes");
  const int64_t skip = settings.at("skip_time_steps").get<int64_t>();
  check(steps <= 0 || skip < steps,
        "sliding_tile_attn: sta_mode=STA_searching: skip_time_steps {} leaves none of the {} "
        "step(s) to search; lower skip_time_steps or give more --num-inference-steps",
        skip, steps);
}

Settings Settings::from(const json& settings, const BackendResources& resources) {
  check_settings(settings, 0);
  Settings result;
  const auto& tile = settings.at("tile_size");
  for (size_t a = 0; a < 3; ++a) result.tile[a] = tile.at(a).get<int64_t>();
  result.skip_time_steps = settings.at("skip_time_steps").get<int64_t>();
  result.window_size = window_size_of(settings);
  if (settings.at("sta_mode") == "STA_searching") {
    result.search = resources.sta_search ? resources.sta_search
                                         : std::make_shared<StaSearch>(
                                               settings.at("mask_search_output").get<std::string>(),
                                               settings.at("mask_search_threshold").get<double>(),
                                               result.skip_time_steps);
  } else if (resources.sta_mask) {
    result.mask = resources.sta_mask;
  } else if (has_string(settings, "mask_strategy_file_path")) {
    result.mask = std::make_shared<const StaMaskStrategy>(
        StaMaskStrategy::load(settings.at("mask_strategy_file_path").get<std::string>()));
  }
  return result;
}

void load_resources(const json& settings, int64_t steps, const std::vector<ResourceUse>& uses,
                    BackendResources& resources) {
  check_settings(settings, steps);
  const int64_t skip = std::min(settings.at("skip_time_steps").get<int64_t>(), steps);
  const std::string dense =
      skip > 0 ? fmt::format("; {} full attention (skip_time_steps)", steps_text(0, skip - 1))
               : std::string();
  if (settings.at("sta_mode") == "STA_searching") {
    for (const ResourceUse& use : uses)
      check(!use.on_gpu,
            "sliding_tile_attn: sta_mode=STA_searching runs on the CPU only (its candidates' "
            "errors are measured there); use --device cpu for the search, then STA_inference on "
            "the GPU");
    const fs::path output = settings.at("mask_search_output").get<std::string>();
    check_writable(output);
    const double threshold = settings.at("mask_search_threshold").get<double>();
    resources.sta_search = std::make_shared<StaSearch>(output, threshold, skip);
    resources.notes.push_back(fmt::format(
        "sliding_tile_attn: STA_searching runs full attention in every step (the output is "
        "dense attention's); at {} each layer and head tries every window the latent grid's "
        "tiles allow and {} gets the smallest whose relative L2 error is under "
        "mask_search_threshold {}",
        steps_text(skip, steps - 1), output.string(), threshold));
    return;
  }
  if (!has_string(settings, "mask_strategy_file_path")) {
    if (steps <= skip) return;  // nothing sparse; the plan warns about it
    const StaWindow w = window_size_of(settings);
    const auto& tile = settings.at("tile_size");
    resources.notes.push_back(fmt::format(
        "sliding_tile_attn: window_size [{}, {}, {}] tiles of {}x{}x{} tokens for every layer and "
        "head at {} (no mask_strategy_file_path), each axis clamped to the latent grid's tile "
        "count{}",
        w[0], w[1], w[2], tile.at(0).get<int64_t>(), tile.at(1).get<int64_t>(),
        tile.at(2).get<int64_t>(), steps_text(skip, steps - 1), dense));
    return;
  }
  const std::string path = settings.at("mask_strategy_file_path").get<std::string>();
  auto mask = std::make_shared<const StaMaskStrategy>(StaMaskStrategy::load(path));
  for (const ResourceUse& use : uses) {
    check(use.layers > 0 && use.heads > 0,
          "{}: sliding_tile_attn needs num_layers and num_attention_heads in {}'s config to check "
          "the mask strategy",
          use.where, use.component);
    mask->check(steps, use.layers, use.heads, settings.at("skip_time_steps").get<int64_t>());
  }
  if (steps > skip)
    resources.notes.push_back(fmt::format(
        "sliding_tile_attn: windows per layer and head from mask_strategy_file_path {} ({} "
        "entries) at {}{}",
        path, mask->entries(), steps_text(skip, steps - 1), dense));
  resources.sta_mask = std::move(mask);
}

}  // namespace mmgen::attention::sliding_tile_attn
