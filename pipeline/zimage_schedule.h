// Z-Image's denoising schedule, as ZImagePipeline sets it up: FlowMatchEulerDiscreteScheduler
// with explicit sigmas torch.linspace(1, 1/N, N) (float32) and mu from calculate_shift over the
// latent's 2x2 patch count. mu changes the schedule only when scheduler_config.json enables
// use_dynamic_shifting; otherwise the config's static `shift` bends the sigmas.
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "pipeline/schedulers/scheduler.h"

namespace mmgen {

// torch.linspace(1.0, 1 / steps, steps) in float32, as torch's CPU kernel computes it (the first
// half counted up from the start, the second half down from the end).
std::vector<double> zimage_default_sigmas(int steps);

// calculate_shift(image_seq_len, ...) with the scheduler config's base/max lengths and shifts
// (diffusers' defaults where the config leaves them out); image_seq_len = (h / 2) · (w / 2) of
// the latent's height and width.
double zimage_mu(const nlohmann::json& scheduler_config, int64_t latent_height,
                 int64_t latent_width);

// The scheduler `class_name` built from its config (flow_shift replaces its `shift`) with
// Z-Image's schedule for `steps` steps over a latent of latent_height x latent_width.
std::unique_ptr<schedulers::Scheduler> make_zimage_scheduler(const std::string& class_name,
                                                             const nlohmann::json& config,
                                                             std::optional<double> flow_shift,
                                                             int steps, int64_t latent_height,
                                                             int64_t latent_width);

}  // namespace mmgen
