// The parts FLUX's and Qwen-Image's memory estimates share (pipeline/flux/flux_memory.h,
// pipeline/qwenimage/qwenimage_memory.h): inventory lookups, the working set of a joint text +
// image transformer on the CPU, and the GPU run's host figures and allocator slack.
#pragma once

#include <cstdint>

#include "pipeline/memory_estimate.h"
#include "pipeline/model_inventory.h"
#include "pipeline/request.h"

namespace mmgen {

uint64_t component_tensor_bytes(const ModelInventory& inventory, const char* component);
uint64_t component_parameters(const ModelInventory& inventory, const char* component);
// One layer's non-float32 weights converted to float32 while it runs.
uint64_t layer_conversion_bytes(const ModelInventory& inventory, const char* component,
                                int64_t layers);

// True CFG runs a second item: a scale above 1 and a negative prompt (diffusers' rule).
bool runs_true_cfg(const Request& request);

// The transformer's CPU working set: `items` sequences of text + image tokens; per block the
// streams, their normed copies, q, k, v, the attention output and projections, the MLP's hidden
// rows and the RoPE tables; the attention kernel's per-thread rows; the latents and scheduler
// state (bytes, before the allocator slack).
struct JointDitShape {
  int64_t items = 1, image_tokens = 0, text_tokens = 0;
  int64_t dim = 0, mlp_dim = 0, head_dim = 0, in_channels = 0;
};
uint64_t joint_dit_working_bytes(const JointDitShape& shape);

// A GPU run's host figures (the mapped weights, the latents and the image coming back), then the
// allocator's fragmentation slack on every stage.
void finish_joint_dit_estimate(MemoryEstimate& estimate, const Request& request,
                               uint64_t latent_values);

}  // namespace mmgen
