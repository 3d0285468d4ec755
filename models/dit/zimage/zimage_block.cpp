#include "models/dit/zimage/zimage_block.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "core/error.h"
#include "core/ops.h"

namespace mmgen::dit {

std::vector<ZImageModulation> zimage_modulations(const std::vector<ZImageBlockWeights>& blocks,
                                                 const std::vector<float>& adaln, Device device,
                                                 const ZImageStackedModulation* stacked) {
  check(!blocks.empty(), "Z-Image modulation: no blocks");
  const int64_t dim = blocks.front().attention_norm1.numel(), width = int64_t(adaln.size());
  int64_t modulated = 0;
  for (const ZImageBlockWeights& w : blocks) modulated += w.modulation_weight.defined() ? 1 : 0;
  const Tensor input = Tensor::from_vector({1, width}, adaln);
  // A [1, adaln_dim] product where the weights live (on the GPU it reads bf16), read back.
  const auto product = [&](const Tensor& weight, const Tensor& bias) {
    check(weight.size(1) == width,
          "Z-Image block: timestep embedding of {} values for a modulation reading {}", width,
          weight.size(1));
    return ops::linear(weight.is_cpu() ? input : input.to(weight.dtype()).to(weight.device()),
                       weight, bias)
        .to(Device::CPU);
  };
  // [modulated, 4, dim]: (scale_msa, gate_msa, scale_mlp, gate_mlp) per block, and the pre-norms
  // the scales apply to, [modulated, 2, dim] (attention_norm1, ffn_norm1), where the products ran.
  Tensor chunks, norms;
  if (stacked) {
    check(stacked->weight.size(0) == modulated * 4 * dim &&
              stacked->norms.numel() == modulated * 2 * dim,
          "Z-Image modulation: a stacked product of {} rows and {} norm values for {} modulated "
          "blocks of width {}",
          stacked->weight.size(0), stacked->norms.numel(), modulated, dim);
    const Tensor& weight = stacked->weight;
    // On the GPU the product and the fold stay there: no read-back stalls the kernel queue.
    chunks = ops::linear(input.to(weight.dtype()).to(weight.device()), weight, stacked->bias)
                 .view({modulated, 4, dim});
    norms = stacked->norms.view({modulated, 2, dim});
  } else if (modulated > 0) {
    chunks = Tensor::empty({modulated, 4, dim});
    norms = Tensor::empty({modulated, 2, dim});
    int64_t j = 0;
    for (const ZImageBlockWeights& w : blocks) {
      if (!w.modulation_weight.defined()) continue;
      const Tensor one = product(w.modulation_weight, w.modulation_bias);
      chunks.select(0, j).copy_from(one.view({4, dim}));
      norms.select(0, j).select(0, 0).copy_from(w.attention_norm1);
      norms.select(0, j).select(0, 1).copy_from(w.ffn_norm1);
      ++j;
    }
  }
  // Each block's four vectors are views of one folded tensor on the device.
  Tensor folded;
  if (modulated > 0) folded = ops::fold_scale_gate(chunks, norms).to(device);
  std::vector<ZImageModulation> out;
  int64_t j = 0;
  for (const ZImageBlockWeights& w : blocks) {
    if (!w.modulation_weight.defined()) {
      out.push_back({w.attention_norm1.to(device), Tensor(), w.ffn_norm1.to(device), Tensor()});
      continue;
    }
    const Tensor m = folded.select(0, j++);
    out.push_back({m.select(0, 0), m.select(0, 1), m.select(0, 2), m.select(0, 3)});
  }
  return out;
}

std::string_view zimage_stack_name(ZImageStage stage) {
  switch (stage) {
    case ZImageStage::NoiseRefiner:
      return "noise_refiner";
    case ZImageStage::ContextRefiner:
      return "context_refiner";
    case ZImageStage::Main:
      break;
  }
  return "layers";
}

Tensor run_zimage_block(Tensor& x, const ZImageBlockWeights& w, const ZImageModulation& m,
                        const ZImageConfig& config, const ZImageRopeTables& rope, DType compute,
                        const attention::Call& call, Tensor normed,
                        const Tensor& next_attention_norm) {
  const int64_t tokens = x.size(0), dim = config.dim, heads = config.n_heads,
                head_dim = config.head_dim();
  check(x.dim() == 2 && x.size(1) == dim && rope.cos.defined() && rope.cos.size(0) == tokens,
        "Z-Image block: x {} with RoPE tables for {} rows", shape_string(x.shape()),
        rope.cos.defined() ? rope.cos.size(0) : 0);
  // diffusers' Attention builds q/k RMSNorm with eps 1e-5 whatever norm_eps says.
  constexpr float kQkEps = 1e-5f;

  // 1. Attention. q and k viewed one row per head get their per-head RMSNorm and rotation in one
  // pass (row r reads the tables at token r / heads).
  Tensor ffn_input;
  {
    if (!normed.defined()) normed = ops::rms_norm(x, m.attention_norm, config.norm_eps, compute);
    Tensor attended;
    {
      std::vector<Tensor> qkv = ops::linear_each(normed, {w.to_q, w.to_k, w.to_v}, compute);
      Tensor q = std::move(qkv[0]), k = std::move(qkv[1]);
      const Tensor v = std::move(qkv[2]);
      Tensor q_heads = q.view({tokens * heads, head_dim});
      Tensor k_heads = k.view({tokens * heads, head_dim});
      ops::rms_norm_rope_(q_heads, w.norm_q, kQkEps, rope.cos, rope.sin, head_dim, heads);
      ops::rms_norm_rope_(k_heads, w.norm_k, kQkEps, rope.cos, rope.sin, head_dim, heads);
      const Shape shape = {1, tokens, heads, head_dim};
      attended = attention::attend(q.view(shape), k.view(shape), v.view(shape), call);
    }  // q, k, v released before the output projection allocates
    // The output in the compute dtype: float32 on the CPU; bf16 on the GPU, read once by the
    // fused post-norm and residual update.
    normed = Tensor();
    const Tensor out = ops::linear(attended.view({tokens, dim}), w.to_out, Tensor(), compute);
    ffn_input =
        ops::add_rms_norm_gated_norm_(x, out, w.attention_norm2, config.norm_eps, m.attention_gate,
                                      m.ffn_norm, config.norm_eps, compute);
  }

  // 2. SwiGLU feed-forward: w2(silu(w1·x) ⊙ w3·x). On the GPU w1 and w3 write the compute dtype
  // and silu_mul reads both once and writes what w2 reads: float32 [tokens, ffn] intermediates
  // cost more than the products' own rounding. The CPU keeps float32 products, its numbers
  // unchanged (silu_mul there is silu_ then mul_ value for value).
  {
    const Tensor normed_ffn = std::move(ffn_input);
    const DType products = x.is_cpu() ? DType::F32 : compute;
    Tensor gated;
    {
      const std::vector<Tensor> gate_up = ops::linear_each(normed_ffn, {w.w1, w.w3}, products);
      gated = ops::silu_mul(gate_up[0], gate_up[1], compute);
    }  // the two halves released before w2 allocates
    const Tensor out = ops::linear(gated, w.w2, Tensor(), compute);
    if (next_attention_norm.defined())
      return ops::add_rms_norm_gated_norm_(x, out, w.ffn_norm2, config.norm_eps, m.ffn_gate,
                                           next_attention_norm, config.norm_eps, compute);
    ops::add_rms_norm_gated_(x, out, w.ffn_norm2, config.norm_eps, m.ffn_gate);
  }
  return Tensor();
}

}  // namespace mmgen::dit
