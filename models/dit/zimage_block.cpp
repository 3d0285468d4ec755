#include "models/dit/zimage_block.h"

#include <cmath>

#include "core/error.h"
#include "core/ops.h"

namespace mmgen::dit {

ZImageModulation zimage_modulation(const ZImageBlockWeights& weights,
                                   const std::vector<float>& adaln, Device device) {
  if (!weights.modulation_weight.defined())
    return {weights.attention_norm1.to(device), Tensor(), weights.ffn_norm1.to(device), Tensor()};
  const int64_t dim = weights.attention_norm1.numel();
  check(int64_t(adaln.size()) == weights.modulation_weight.size(1),
        "Z-Image block: timestep embedding of {} values for a modulation reading {}", adaln.size(),
        weights.modulation_weight.size(1));
  // A [1, adaln_dim] product where the weights live (on the GPU it reads bf16), then
  // element-wise work on 4·dim values on the host.
  const Tensor input = Tensor::from_vector({1, int64_t(adaln.size())}, adaln);
  const Tensor& w = weights.modulation_weight;
  const Tensor chunks = ops::linear(w.is_cpu() ? input : input.to(w.dtype()).to(w.device()), w,
                                    weights.modulation_bias)
                            .to(Device::CPU);
  const float* m = chunks.data<float>();  // (scale_msa, gate_msa, scale_mlp, gate_mlp)
  const float* norm1 = weights.attention_norm1.data<float>();
  const float* ffn_norm1 = weights.ffn_norm1.data<float>();
  const size_t n = size_t(dim);
  std::vector<float> attention_norm(n), attention_gate(n), ffn_norm(n), ffn_gate(n);
  for (int64_t i = 0; i < dim; ++i) {
    attention_norm[size_t(i)] = norm1[i] * (1.0f + m[i]);
    attention_gate[size_t(i)] = std::tanh(m[dim + i]);
    ffn_norm[size_t(i)] = ffn_norm1[i] * (1.0f + m[2 * dim + i]);
    ffn_gate[size_t(i)] = std::tanh(m[3 * dim + i]);
  }
  const auto placed = [&](const std::vector<float>& v) {
    return Tensor::from_vector({dim}, v).to(device);
  };
  return {placed(attention_norm), placed(attention_gate), placed(ffn_norm), placed(ffn_gate)};
}

void run_zimage_block(Tensor& x, const ZImageBlockWeights& w, const ZImageModulation& m,
                      const ZImageConfig& config, const ZImageRopeTables& rope, DType compute,
                      const ZImageAttentionCall& call) {
  const int64_t tokens = x.size(0), dim = config.dim, heads = config.n_heads,
                head_dim = config.head_dim();
  check(x.dim() == 2 && x.size(1) == dim && rope.cos.defined() && rope.cos.size(0) == tokens,
        "Z-Image block: x {} with RoPE tables for {} rows", shape_string(x.shape()),
        rope.cos.defined() ? rope.cos.size(0) : 0);
  // diffusers' Attention builds q/k RMSNorm with eps 1e-5 whatever norm_eps says.
  constexpr float kQkEps = 1e-5f;

  // 1. Attention. q and k viewed one row per head get their per-head RMSNorm and rotation in one
  // pass (row r reads the tables at token r / heads).
  {
    const Tensor normed = ops::rms_norm(x, m.attention_norm, config.norm_eps, compute);
    Tensor attended;
    {
      Tensor q = ops::linear(normed, w.to_q, Tensor(), compute);
      Tensor k = ops::linear(normed, w.to_k, Tensor(), compute);
      const Tensor v = ops::linear(normed, w.to_v, Tensor(), compute);
      Tensor q_heads = q.view({tokens * heads, head_dim});
      Tensor k_heads = k.view({tokens * heads, head_dim});
      ops::rms_norm_rope_(q_heads, w.norm_q, kQkEps, rope.cos, rope.sin, head_dim, heads);
      ops::rms_norm_rope_(k_heads, w.norm_k, kQkEps, rope.cos, rope.sin, head_dim, heads);
      const Shape shape = {1, tokens, heads, head_dim};
      attended = zimage_attention(q.view(shape), k.view(shape), v.view(shape), call);
    }  // q, k, v released before the output projection allocates
    // The output in the compute dtype: float32 on the CPU; bf16 on the GPU, read once by the
    // fused post-norm and residual update.
    const Tensor out = ops::linear(attended.view({tokens, dim}), w.to_out, Tensor(), compute);
    ops::add_rms_norm_gated_(x, out, w.attention_norm2, config.norm_eps, m.attention_gate);
  }

  // 2. SwiGLU feed-forward: w2(silu(w1·x) ⊙ w3·x). On the GPU w1 and w3 write the compute dtype
  // and silu_mul reads both once and writes what w2 reads: float32 [tokens, ffn] intermediates
  // cost more than the products' own rounding. The CPU keeps float32 products, its numbers
  // unchanged (silu_mul there is silu_ then mul_ value for value).
  {
    const Tensor normed = ops::rms_norm(x, m.ffn_norm, config.norm_eps, compute);
    const DType products = x.is_cpu() ? DType::F32 : compute;
    Tensor gated;
    {
      const Tensor gate = ops::linear(normed, w.w1, Tensor(), products);
      gated = ops::silu_mul(gate, ops::linear(normed, w.w3, Tensor(), products), compute);
    }  // the two halves released before w2 allocates
    const Tensor out = ops::linear(gated, w.w2, Tensor(), compute);
    ops::add_rms_norm_gated_(x, out, w.ffn_norm2, config.norm_eps, m.ffn_gate);
  }
}

}  // namespace mmgen::dit
