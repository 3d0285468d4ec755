// The memory estimates of QwenImagePipeline (see pipeline/memory_estimate.h): on the host, the
// mapped weights and per stage what the Qwen2.5-VL encoder (paged, its KV pool whole), the
// Qwen-Image transformer and the Wan-style VAE allocate on the CPU; on the GPU, the weights each
// component keeps resident. From the component configs and safetensors headers only.
#pragma once

#include "pipeline/memory_estimate.h"
#include "pipeline/model_index.h"
#include "pipeline/model_inventory.h"
#include "pipeline/request.h"

namespace mmgen {

MemoryEstimate estimate_qwen_image_memory(const Request& request, const ModelIndex& index,
                                          const ModelInventory& inventory);
GpuWeights estimate_qwen_image_gpu_weights(const Request& request, const ModelIndex& index,
                                           const ModelInventory& inventory);

}  // namespace mmgen
