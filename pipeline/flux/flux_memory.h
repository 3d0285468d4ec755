// The memory estimates of FluxPipeline (see pipeline/memory_estimate.h): on the host, the mapped
// weights and per stage what models/text_encoders (CLIP and T5 on the paged backends), models/dit
// (FluxTransformer) and models/vae (AutoencoderKL) allocate on the CPU; on the GPU, the weights
// each component keeps resident. From the component configs and safetensors headers only.
#pragma once

#include "pipeline/memory_estimate.h"
#include "pipeline/model_index.h"
#include "pipeline/model_inventory.h"
#include "pipeline/request.h"

namespace mmgen {

MemoryEstimate estimate_flux_memory(const Request& request, const ModelIndex& index,
                                    const ModelInventory& inventory);
GpuWeights estimate_flux_gpu_weights(const Request& request, const ModelIndex& index,
                                     const ModelInventory& inventory);

}  // namespace mmgen
