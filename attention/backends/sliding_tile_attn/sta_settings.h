// sliding_tile_attn's settings, read once from the validated --attention-backend-config (the
// schema and defaults are in descriptor.cpp) and shared by the CPU and the CUDA implementation.
#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <vector>

#include "attention/backend.h"
#include "attention/backends/descriptor.h"
#include "attention/backends/sliding_tile_attn/sta_mask.h"
#include "attention/sta_tiling.h"

namespace mmgen::attention::sliding_tile_attn {

struct Settings {
  Grid3 tile{};                 // tile size in latent tokens (t, h, w)
  int64_t skip_time_steps = 0;  // leading steps with full attention
  std::shared_ptr<const StaMaskStrategy> mask;

  // `settings` as validate_backend_config returns them. The mask is the plan's when `resources`
  // has it, else read from mask_strategy_file_path (tests, `mmgen attention`). Throws Error for a
  // mode other than STA_inference (search and tuning are not implemented) or without a mask.
  static Settings from(const nlohmann::json& settings, const BackendResources& resources);
};

// The descriptor's resource loader: in STA_inference mode, the mask-strategy file, loaded once and
// checked to cover every step, layer and head each use needs.
void load_resources(const nlohmann::json& settings, int64_t steps,
                    const std::vector<ResourceUse>& uses, BackendResources& resources);

}  // namespace mmgen::attention::sliding_tile_attn
