// The host memory estimate of WanPipeline (see pipeline/memory_estimate.h): buffer sizes follow
// what models/dit, models/text_encoders and models/vae allocate on the CPU, from the component
// configs and the safetensors headers only. With --device cuda the stages run on the GPU and the
// host keeps the mapped weights, the latents and the decoded video; GPU memory is not estimated.
#pragma once

#include "pipeline/memory_estimate.h"
#include "pipeline/model_index.h"
#include "pipeline/model_inventory.h"
#include "pipeline/request.h"

namespace mmgen {

MemoryEstimate estimate_wan_memory(const Request& request, const ModelIndex& index,
                                   const ModelInventory& inventory);

// The weights WanPipeline keeps on the GPU for `request` (--device cuda): the text encoder's and
// the transformer's as their set_device places them (FP8 rows with --gpu-matmul-precision fp8),
// the VAE's bounded by all its parameters in float32.
GpuWeights estimate_wan_gpu_weights(const Request& request, const ModelIndex& index,
                                    const ModelInventory& inventory);

// The VAE decoder's working set (activations and causal-convolution caches, without the output
// video) when it decodes a region of `height` x `width` output pixels from `latent_frames` latent
// frames; `config_json` is the VAE's config.json.
uint64_t wan_vae_working_set(const nlohmann::json& config_json, int64_t height, int64_t width,
                             int64_t latent_frames);

}  // namespace mmgen
