// Which implementation of a planned backend a stack of layers runs on a device: the one place
// that turns the attention plan's choice (a backend name and its validated settings) into the
// objects attention::Layer calls, from the backend's descriptor (attention/backends/).
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <string_view>

#include "attention/backend.h"
#include "attention/layer.h"
#include "core/tensor.h"

namespace mmgen::attention {

// The backend of `stack`'s layers for a run on `device`, as the plan chose `name` with its
// validated `settings`:
// - CPU: the descriptor's CPU implementation, a fresh one per call (every layer gets its own).
// - GPU: for a stack of video tokens alone (StackTraits::video_tokens_only), the backend's GPU
//   half when its descriptor has one; otherwise the dense kernel its descriptor names (the plain
//   reference kernel for torch_sdpa, FlashAttention for the others). One object serves the
//   stack's layers. A dense backend whose GPU half takes only video self-attention (sage_attn)
//   runs FlashAttention on the other stacks, and says so in the log.
// Throws Error for a backend this build cannot run there.
std::shared_ptr<AttentionBackend> make_layer_backend(std::string_view name,
                                                     const nlohmann::json& settings,
                                                     const BackendResources& resources,
                                                     const StackTraits& stack, Device device);

// Whether the backend's descriptor reads extra checkpoint weights per layer, and the name
// fragments it reads them by ("proj_l."; attention/backends/descriptor.h).
std::vector<std::string> extra_weight_fragments(std::string_view name);
// Whether a backend's GPU half reads an extra weight in the compute dtype (bf16) rather than as
// stored (float32): VSA's to_gate_compress.weight, a product like the model's own.
bool extra_weight_in_compute_dtype(std::string_view name, std::string_view key);

}  // namespace mmgen::attention
