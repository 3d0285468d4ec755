// The host memory estimate of ZImagePipeline (see pipeline/memory_estimate.h): the mapped
// weights, and per stage the buffers models/text_encoders (Qwen3 on the paged backends, with its
// KV pool allocated whole), models/dit (ZImageTransformer) and models/vae (AutoencoderKL decoder)
// allocate on the CPU, from the component configs and safetensors headers only.
#pragma once

#include "pipeline/memory_estimate.h"
#include "pipeline/model_index.h"
#include "pipeline/model_inventory.h"
#include "pipeline/request.h"

namespace mmgen {

MemoryEstimate estimate_zimage_memory(const Request& request, const ModelIndex& index,
                                      const ModelInventory& inventory);

}  // namespace mmgen
