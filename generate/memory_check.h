// The memory check of `generate` (and the memory section of `mmgen inspect`): the pipeline's
// estimate for the request against the free memory, and when it does not fit, the flags that
// would make it fit (fewer frames, a smaller size, --vae-tiling), each checked against the same
// estimate.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "core/system_memory.h"
#include "pipeline/memory_estimate.h"
#include "pipeline/model_inventory.h"
#include "pipeline/registry.h"

namespace mmgen::cli {

struct MemoryCheck {
  MemoryEstimate estimate;
  std::optional<AvailableMemory> available;  // nullopt: the machine could not be read
  bool fits() const { return !available || estimate.total() <= available->bytes; }
  // When it does not fit: alternatives that do, as flags ("--num-frames 33"), best first; empty
  // when nothing does (the weights alone are too large).
  std::vector<std::string> suggestions;
};

MemoryCheck check_request_memory(const PipelineSpec& spec, const Request& request,
                                 const ModelIndex& index, const ModelInventory& inventory,
                                 const std::optional<AvailableMemory>& available);

// One line: what the request needs, what is free, what would fit, and --skip-memory-check.
std::string memory_refusal(const MemoryCheck& check, const Request& request);

// The weights the pipeline keeps on the GPU for the request (the offload --gpu-offload and
// --max-gpu-memory choose counted), as `inspect` and --dry-run print them; null where the pipeline
// has no such estimate.
nlohmann::json gpu_weights_json(const PipelineSpec& spec, const Request& request,
                                const ModelIndex& index, const ModelInventory& inventory);

// --device cuda with --max-gpu-memory: one line when the weights resident at once exceed the
// limit (with the FP8 and streamed-blocks figures where they would fit); nullopt when they fit,
// or when there is no limit or no estimate.
// The offload the pipeline will run the request with on the GPU (--gpu-offload, --max-gpu-memory);
// an explicit mode the pipeline cannot do is refused here, in one line, before anything loads.
GpuOffload planned_gpu_offload(const PipelineSpec& spec, const Request& request,
                               const ModelIndex& index, const ModelInventory& inventory);

std::optional<std::string> gpu_weights_refusal(const PipelineSpec& spec, const Request& request,
                                               const ModelIndex& index,
                                               const ModelInventory& inventory);

}  // namespace mmgen::cli
