#include "pipeline/joint_dit_memory.h"

#include <omp.h>

#include <algorithm>

namespace mmgen {
namespace {

constexpr double kAllocatorSlack = 1.75;  // as pipeline/zimage/zimage_memory.cpp

}  // namespace

uint64_t component_tensor_bytes(const ModelInventory& inventory, const char* component) {
  const ComponentInventory* found = inventory.find(component);
  return found ? found->tensor_bytes : 0;
}

uint64_t component_parameters(const ModelInventory& inventory, const char* component) {
  const ComponentInventory* found = inventory.find(component);
  return found ? uint64_t(found->parameters) : 0;
}

uint64_t layer_conversion_bytes(const ModelInventory& inventory, const char* component,
                                int64_t layers) {
  const ComponentInventory* found = inventory.find(component);
  if (!found || layers <= 0) return 0;
  const int64_t stored_f32 =
      found->dtype_parameters.count("f32") ? found->dtype_parameters.at("f32") : 0;
  const int64_t converted = found->parameters - stored_f32;
  return converted > 0 ? uint64_t(converted / layers) * kFloatBytes : 0;
}

bool runs_true_cfg(const Request& request) {
  return request.true_cfg_scale > 1.0 &&
         (!request.negative_prompt.empty() || request.negative_prompt_embeds.has_value());
}

uint64_t joint_dit_working_bytes(const JointDitShape& s) {
  const uint64_t sequence = uint64_t(s.image_tokens + s.text_tokens);
  const uint64_t items = uint64_t(s.items);
  const uint64_t block =
      items * sequence * (12 * uint64_t(s.dim) + 2 * uint64_t(s.mlp_dim) + uint64_t(s.head_dim));
  const uint64_t attention = uint64_t(std::max(1, omp_get_max_threads())) * 128 * sequence;
  const uint64_t state = 8 * uint64_t(s.image_tokens) * uint64_t(s.in_channels);
  return (block + attention + state) * kFloatBytes;
}

void finish_joint_dit_estimate(MemoryEstimate& estimate, const Request& request,
                               uint64_t latent_values) {
  if (request.device == "cuda") {
    estimate.text_encoding = 0;
    estimate.denoising = 6 * latent_values * kFloatBytes;
    estimate.decoding = estimate.output + estimate.output / 4;
  }
  for (uint64_t* stage : {&estimate.text_encoding, &estimate.denoising, &estimate.decoding})
    *stage = uint64_t(double(*stage) * kAllocatorSlack);
}

}  // namespace mmgen
