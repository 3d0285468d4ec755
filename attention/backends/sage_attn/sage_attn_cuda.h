// sage_attn's GPU half (CUDA builds only): sage_attn_cuda.cpp.
#pragma once

#include <memory>
#include <nlohmann/json.hpp>

#include "attention/backend.h"
#include "attention/sparse_self_attention_cuda.h"

namespace mmgen::attention::sage_attn {

// The descriptor's CUDA factory: `settings` validated (qk_quant_gran, smooth_k).
std::unique_ptr<cuda::SparseSelfAttentionCuda> make_cuda(const nlohmann::json& settings,
                                                         const BackendResources& resources);

}  // namespace mmgen::attention::sage_attn
