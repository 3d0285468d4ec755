// What FLUX and Qwen-Image share around their transformers: latents packed into 2x2 tokens
// (FluxPipeline._pack_latents; QwenImagePipeline's is the same for its one frame) and the
// schedule both set up: FlowMatchEulerDiscrete over np.linspace(1, 1/N, N) with mu from
// calculate_shift over the packed token count.
#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "pipeline/schedulers/scheduler.h"

namespace mmgen {

// [1, C, h, w] → [1, (h/2)·(w/2), 4·C], token (i, j) holding channel c of the 2x2 patch at
// (dy, dx) at 4c + 2dy + dx. unpack is its inverse.
Tensor pack_latents_2x2(const Tensor& latents);
Tensor unpack_latents_2x2(const Tensor& packed, int64_t channels, int64_t height, int64_t width);

// A request's starting latents, packed: `given` (--latents: [1, C, h, w] as `shape`, or diffusers'
// [1, 1, C, h, w] for one frame, which holds the same values) when defined, else torch's CPU randn
// of `shape` from `seed`.
Tensor initial_packed_latents(const Tensor& given, const Shape& shape, uint64_t seed);

// np.linspace(1, 1/steps, steps) in float64 (the scheduler rounds them to float32).
std::vector<double> numpy_linspace_sigmas(int steps);

// The scheduler `class_name` built from its config (flow_shift replaces its `shift`) with those
// sigmas and mu for `steps` steps over a latent of latent_height x latent_width.
std::unique_ptr<schedulers::Scheduler> make_packed_image_scheduler(const std::string& class_name,
                                                                   const nlohmann::json& config,
                                                                   std::optional<double> flow_shift,
                                                                   int steps, int64_t latent_height,
                                                                   int64_t latent_width);

}  // namespace mmgen
