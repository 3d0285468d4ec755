// sla_attn's GPU half (CUDA builds only): sla_attn_cuda.cpp.
#pragma once

#include <memory>
#include <nlohmann/json.hpp>

#include "attention/backend.h"
#include "attention/kernels/sla_core.h"
#include "attention/sparse_self_attention_cuda.h"

namespace mmgen::attention::sla_attn {

// The descriptor's CUDA factory: `settings` validated, the plan's resources.
std::unique_ptr<cuda::SparseSelfAttentionCuda> make_cuda(const nlohmann::json& settings,
                                                         const BackendResources& resources);

// The GPU SLA for parsed settings; with settings.int8_qk the sparse branch's scores come from
// INT8 q and k (SageSLA, attention/backends/sage_sla_attn: the CPU's sla_quant.h to the integer).
std::unique_ptr<cuda::SparseSelfAttentionCuda> make_sla_cuda(const sla::SlaSettings& settings);

}  // namespace mmgen::attention::sla_attn
