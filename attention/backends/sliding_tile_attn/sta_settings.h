// sliding_tile_attn's settings, read once from the validated --attention-backend-config (the
// schema and defaults are in sliding_tile_attn.cpp) and shared by the CPU and the CUDA
// implementation.
#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <vector>

#include "attention/backend.h"
#include "attention/backends/descriptor.h"
#include "attention/backends/sliding_tile_attn/sta_mask.h"
#include "attention/backends/sliding_tile_attn/sta_pattern.h"
#include "attention/backends/sliding_tile_attn/sta_search.h"
#include "attention/kernels/sta_tiling.h"

namespace mmgen::attention::sliding_tile_attn {

struct Settings {
  Grid3 tile{};                 // tile size in latent tokens (t, h, w)
  int64_t skip_time_steps = 0;  // leading steps with full attention
  // Where the windows come from: the mask-strategy file when there is one, else window_size for
  // every step, layer and head (a window beyond the grid's tile count covers the whole axis).
  std::shared_ptr<const StaMaskStrategy> mask;
  StaWindow window_size{};
  // STA_searching: full attention in every call, and the search records the candidates' errors.
  std::shared_ptr<StaSearch> search;

  // The window of one (step >= skip_time_steps, layer, head); nullopt when the mask file has no
  // entry for it.
  std::optional<StaWindow> window(int64_t step, int64_t layer, int64_t head) const;

  // `settings` as validate_backend_config returns them. The mask and the search are the plan's
  // when `resources` has them, else made from the settings (tests, `mmgen attention`). Throws
  // Error for what check_settings refuses.
  static Settings from(const nlohmann::json& settings, const BackendResources& resources);
};

// What the dry run and the run both refuse before anything is loaded: the tuning modes (not
// implemented), a mask file or search output given to the mode that does not read it, and a
// search without an output file or with nothing to search (skip_time_steps >= steps; `steps` 0:
// not known). Throws Error, one line.
void check_settings(const nlohmann::json& settings, int64_t steps);

// The descriptor's resource loader: checks the settings against the run, loads the mask-strategy
// file once (STA_inference) and checks it covers every step, layer and head each use needs, or
// makes the run's search (STA_searching); adds a note saying which windows run and from where.
void load_resources(const nlohmann::json& settings, int64_t steps,
                    const std::vector<ResourceUse>& uses, BackendResources& resources);

}  // namespace mmgen::attention::sliding_tile_attn
