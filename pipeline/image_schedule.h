// The schedule the image DiTs (FLUX, Qwen-Image, Z-Image) set up, as their diffusers pipelines
// do: the scheduler model_index.json names, over explicit sigmas (FLUX's and Qwen-Image's
// np.linspace(1, 1/N, N), Z-Image's torch.linspace in float32, zimage_schedule.h), with mu from
// calculate_shift over the latent's 2x2 patch count. mu changes the schedule only when
// scheduler_config.json enables use_dynamic_shifting; otherwise the config's static `shift` bends
// the sigmas.
#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "pipeline/schedulers/scheduler.h"

namespace mmgen {

// np.linspace(1, 1/steps, steps) in float64 (the scheduler rounds them to float32).
std::vector<double> numpy_linspace_sigmas(int steps);

// calculate_shift(image_seq_len, ...) with the scheduler config's base/max lengths and shifts
// (diffusers' defaults where the config leaves them out); image_seq_len = (h / 2) · (w / 2) of
// the latent's height and width.
double image_mu(const nlohmann::json& scheduler_config, int64_t latent_height,
                int64_t latent_width);

// The scheduler `class_name` built from its config (flow_shift replaces its `shift`), set to
// `sigmas` (one per step) and the mu of a latent of latent_height x latent_width.
std::unique_ptr<schedulers::Scheduler> make_image_scheduler(
    const std::string& class_name, const nlohmann::json& config, std::optional<double> flow_shift,
    std::vector<double> sigmas, int64_t latent_height, int64_t latent_width);

}  // namespace mmgen
