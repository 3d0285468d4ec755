#include "attention/backends/video_sparse_attn/vsa_gate.h"

#include "core/error.h"
#include "core/ops.h"

namespace mmgen::attention {

Tensor vsa_gate(const LayerWeights& weights, const Tensor& attention_input, int64_t heads) {
  const auto weight = weights.find(kVsaGateWeightKey);
  if (weight == weights.end()) return Tensor();
  check(attention_input.dim() == 3,
        "video_sparse_attn gate: input must be [batch, seq, dim], got {}",
        shape_string(attention_input.shape()));
  const int64_t dim = attention_input.size(2);
  check(weight->second.dim() == 2 && weight->second.size(0) == dim && weight->second.size(1) == dim,
        "video_sparse_attn gate: to_gate_compress.weight is {}, expected [{}, {}]",
        shape_string(weight->second.shape()), dim, dim);
  check(heads > 0 && dim % heads == 0, "video_sparse_attn gate: {} heads do not divide dim {}",
        heads, dim);
  const auto bias = weights.find(kVsaGateBiasKey);
  // On the GPU the weight is bf16 and so is the input (a bf16 product, float32 out); on the CPU
  // both are float32.
  const bool same_dtype = attention_input.dtype() == weight->second.dtype();
  const Tensor input = same_dtype ? attention_input : attention_input.to(DType::F32).contiguous();
  const Tensor gate = ops::linear(input, weight->second,
                                  bias == weights.end() ? Tensor() : bias->second, DType::F32);
  return gate.view({attention_input.size(0), attention_input.size(1), heads, dim / heads});
}

}  // namespace mmgen::attention
