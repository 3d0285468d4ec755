#include "models/dit/flux_block.h"

#include <utility>

#include "core/error.h"
#include "core/ops.h"

namespace mmgen::dit {
namespace {

// diffusers builds every FLUX LayerNorm and q/k RMSNorm with eps 1e-6.
constexpr float kEps = 1e-6f;

// The adaLN product for one item: [chunks, dim] float32 (1 is already in the scales' bias).
Tensor modulation(const FluxLinear& w, const Tensor& conditioning, int64_t chunks) {
  const Tensor values = ops::linear(conditioning, w.weight, w.bias, DType::F32);
  return values.view({chunks, values.numel() / chunks});
}

// q or k of one stream: its projection, then per-head RMSNorm and the rotation of its rows.
Tensor rotated(const Tensor& normed, const FluxLinear& projection, const Tensor& norm,
               const FluxRopeTables& rope, const FluxConfig& config, DType compute) {
  Tensor x = ops::linear(normed, projection.weight, projection.bias, compute);
  Tensor heads = x.view({x.size(0) * config.num_attention_heads, config.attention_head_dim});
  ops::rms_norm_rope_(heads, norm, kEps, rope.cos, rope.sin, config.attention_head_dim,
                      config.num_attention_heads);
  return x;
}

Tensor as_heads(const Tensor& x, const FluxConfig& config) {
  return x.view({1, x.size(0), config.num_attention_heads, config.attention_head_dim});
}

// The MLP of one stream: out(GELU_tanh(in(x))), float32 for the gated residual update.
Tensor mlp(const Tensor& normed, const FluxLinear& in, const FluxLinear& out, DType compute) {
  const Tensor hidden = ops::linear(normed, in.weight, in.bias, compute, Activation::GeluTanh);
  return ops::linear(hidden, out.weight, out.bias, DType::F32);
}

}  // namespace

Tensor flux_stack_rows(const std::vector<Tensor>& parts) {
  check(!parts.empty(), "flux_stack_rows: nothing to stack");
  int64_t rows = 0;
  for (const Tensor& part : parts) rows += part.size(0);
  const Tensor& first = parts.front();
  Tensor out = Tensor::empty({rows, first.size(1)}, first.dtype(), first.device());
  int64_t row = 0;
  for (const Tensor& part : parts) {
    out.slice(0, row, row + part.size(0)).copy_from(part);
    row += part.size(0);
  }
  return out;
}

void run_flux_double_block(Tensor& text, Tensor& image, const FluxDoubleBlockWeights& w,
                           const Tensor& conditioning, const FluxConfig& config,
                           const FluxRopeTables& rope, DType compute,
                           const FluxAttentionCall& call) {
  const int64_t text_tokens = text.size(0), tokens = text_tokens + image.size(0);
  check(rope.cos.size(0) == tokens, "FLUX double block: RoPE tables for {} rows, {} tokens",
        rope.cos.size(0), tokens);
  // shift, 1 + scale, gate for attention; then for the MLP.
  const Tensor image_mod = modulation(w.image_modulation, conditioning, 6);
  const Tensor text_mod = modulation(w.text_modulation, conditioning, 6);

  Tensor image_normed = ops::modulated_layer_norm(image, image_mod.select(0, 0),
                                                  image_mod.select(0, 1), kEps, compute);
  Tensor text_normed =
      ops::modulated_layer_norm(text, text_mod.select(0, 0), text_mod.select(0, 1), kEps, compute);
  Tensor attended;
  {
    const FluxRopeTables text_rope = rope.rows(0, text_tokens);
    const FluxRopeTables image_rope = rope.rows(text_tokens, tokens);
    // The joint sequence is [text, image], as diffusers concatenates it.
    const Tensor q =
        flux_stack_rows({rotated(text_normed, w.add_q, w.norm_added_q, text_rope, config, compute),
                         rotated(image_normed, w.to_q, w.norm_q, image_rope, config, compute)});
    const Tensor k =
        flux_stack_rows({rotated(text_normed, w.add_k, w.norm_added_k, text_rope, config, compute),
                         rotated(image_normed, w.to_k, w.norm_k, image_rope, config, compute)});
    const Tensor v =
        flux_stack_rows({ops::linear(text_normed, w.add_v.weight, w.add_v.bias, compute),
                         ops::linear(image_normed, w.to_v.weight, w.to_v.bias, compute)});
    attended = flux_attention(as_heads(q, config), as_heads(k, config), as_heads(v, config), call)
                   .contiguous()
                   .view({tokens, config.dim()});
  }
  const Tensor text_out =
      ops::linear(attended.slice(0, 0, text_tokens), w.add_out.weight, w.add_out.bias, DType::F32);
  const Tensor image_out = ops::linear(attended.slice(0, text_tokens, tokens), w.to_out.weight,
                                       w.to_out.bias, DType::F32);
  attended = Tensor();

  // Residual under the attention gate, then the MLP's modulated norm, in one op.
  image_normed =
      ops::add_gated_layer_norm_(image, image_out, image_mod.select(0, 2), kEps,
                                 image_mod.select(0, 4), image_mod.select(0, 3), compute);
  ops::add_gated_(image, mlp(image_normed, w.image_mlp_in, w.image_mlp_out, compute),
                  image_mod.select(0, 5));
  text_normed = ops::add_gated_layer_norm_(text, text_out, text_mod.select(0, 2), kEps,
                                           text_mod.select(0, 4), text_mod.select(0, 3), compute);
  ops::add_gated_(text, mlp(text_normed, w.text_mlp_in, w.text_mlp_out, compute),
                  text_mod.select(0, 5));
}

void run_flux_single_block(Tensor& joint, const FluxSingleBlockWeights& w,
                           const Tensor& conditioning, const FluxConfig& config,
                           const FluxRopeTables& rope, DType compute,
                           const FluxAttentionCall& call) {
  const int64_t tokens = joint.size(0);
  check(rope.cos.size(0) == tokens, "FLUX single block: RoPE tables for {} rows, {} tokens",
        rope.cos.size(0), tokens);
  const Tensor mod = modulation(w.modulation, conditioning, 3);  // shift, 1 + scale, gate
  const Tensor normed =
      ops::modulated_layer_norm(joint, mod.select(0, 0), mod.select(0, 1), kEps, compute);
  Tensor out;
  {
    const Tensor q = rotated(normed, w.to_q, w.norm_q, rope, config, compute);
    const Tensor k = rotated(normed, w.to_k, w.norm_k, rope, config, compute);
    const Tensor v = ops::linear(normed, w.to_v.weight, w.to_v.bias, compute);
    const Tensor attended =
        flux_attention(as_heads(q, config), as_heads(k, config), as_heads(v, config), call)
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
