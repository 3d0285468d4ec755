#include "models/dit/flux/flux_block.h"

#include <utility>

#include "core/error.h"
#include "core/ops.h"
#include "models/dit/mmdit/mmdit_joint_block.h"
#include "models/dit/mmdit/mmdit_layers.h"

namespace mmgen::dit {

void run_flux_double_block(Tensor& text, Tensor& image, const FluxDoubleBlockWeights& w,
                           const Tensor& conditioning, const FluxConfig& config,
                           const FluxRopeTables& rope, DType compute, const attention::Call& call) {
  run_mmdit_joint_block(text, image, w, conditioning,
                        {config.num_attention_heads, config.attention_head_dim}, rope, compute,
                        call, "FLUX double block");
}

void run_flux_single_block(Tensor& joint, const FluxSingleBlockWeights& w,
                           const Tensor& conditioning, const FluxConfig& config,
                           const FluxRopeTables& rope, DType compute, const attention::Call& call) {
  const int64_t tokens = joint.size(0);
  const MMDiTHeads heads{config.num_attention_heads, config.attention_head_dim};
  check(rope.cos.size(0) == tokens, "FLUX single block: RoPE tables for {} rows, {} tokens",
        rope.cos.size(0), tokens);
  const Tensor mod = mmdit_modulation(w.modulation, conditioning, 3);  // shift, 1 + scale, gate
  const Tensor normed =
      ops::modulated_layer_norm(joint, mod.select(0, 0), mod.select(0, 1), kMMDiTEps, compute);
  Tensor out;
  {
    const Tensor q = mmdit_rotated(normed, w.to_q, w.norm_q, rope, heads, compute);
    const Tensor k = mmdit_rotated(normed, w.to_k, w.norm_k, rope, heads, compute);
    const Tensor v = ops::linear(normed, w.to_v.weight, w.to_v.bias, compute);
    const Tensor attended = attention::attend(mmdit_as_heads(q, heads), mmdit_as_heads(k, heads),
                                              mmdit_as_heads(v, heads), call)
                                .contiguous()
                                .view({tokens, config.dim()});
    out = ops::linear(attended, w.out_attention, Tensor(), DType::F32);
  }
  // proj_out(cat[attention, mlp]) as the sum of its two column blocks' products.
  const Tensor hidden =
      ops::linear(normed, w.mlp_in.weight, w.mlp_in.bias, compute, Activation::GeluTanh);
  ops::add_(out, ops::linear(hidden, w.out_mlp, w.out_bias, DType::F32));
  ops::add_gated_(joint, out, mod.select(0, 2));
}

}  // namespace mmgen::dit
