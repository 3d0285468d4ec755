// sla_attn's GPU half (CUDA builds only): sla_attn_cuda.cpp.
#pragma once

#include <memory>
#include <nlohmann/json.hpp>

#include "attention/backend.h"
#include "attention/sparse_self_attention_cuda.h"

namespace mmgen::attention::sla_attn {

// The descriptor's CUDA factory: `settings` validated, the plan's resources.
std::unique_ptr<cuda::SparseSelfAttentionCuda> make_cuda(const nlohmann::json& settings,
                                                         const BackendResources& resources);

}  // namespace mmgen::attention::sla_attn
