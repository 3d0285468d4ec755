#include "models/dit/qwenimage_block.h"

#include "core/error.h"
#include "core/ops.h"
#include "models/dit/flux_block.h"

namespace mmgen::dit {
namespace {

// diffusers builds the block's LayerNorms and q/k RMSNorms with eps 1e-6.
constexpr float kEps = 1e-6f;

// The adaLN product for one item: [6, dim] float32 (1 is already in the scales' bias).
Tensor modulation(const FluxLinear& w, const Tensor& conditioning) {
  const Tensor values = ops::linear(conditioning, w.weight, w.bias, DType::F32);
  return values.view({6, values.numel() / 6});
}

// q or k of one stream: its projection, then per-head RMSNorm and the rotation of its rows (the
// order of the attention processor: norm_q, then apply_rotary_emb_qwen).
Tensor rotated(const Tensor& normed, const FluxLinear& projection, const Tensor& norm,
               const FluxRopeTables& rope, const QwenImageConfig& config, DType compute) {
  Tensor x = ops::linear(normed, projection.weight, projection.bias, compute);
  Tensor heads = x.view({x.size(0) * config.num_attention_heads, config.attention_head_dim});
  ops::rms_norm_rope_(heads, norm, kEps, rope.cos, rope.sin, config.attention_head_dim,
                      config.num_attention_heads);
  return x;
}

Tensor as_heads(const Tensor& x, const QwenImageConfig& config) {
  return x.view({1, x.size(0), config.num_attention_heads, config.attention_head_dim});
}

// FeedForward(activation_fn="gelu-approximate"): net.2(GELU_tanh(net.0(x))), float32 for the gated
// residual update.
Tensor mlp(const Tensor& normed, const FluxLinear& in, const FluxLinear& out, DType compute) {
  const Tensor hidden = ops::linear(normed, in.weight, in.bias, compute, Activation::GeluTanh);
  return ops::linear(hidden, out.weight, out.bias, DType::F32);
}

}  // namespace

void run_qwenimage_block(Tensor& text, Tensor& image, const QwenImageBlockWeights& w,
                         const Tensor& conditioning, const QwenImageConfig& config,
                         const FluxRopeTables& rope, DType compute, const FluxAttentionCall& call) {
  const int64_t text_tokens = text.size(0), tokens = text_tokens + image.size(0);
  check(rope.cos.size(0) == tokens, "Qwen-Image block: RoPE tables for {} rows, {} tokens",
        rope.cos.size(0), tokens);
  // _modulate's chunks: shift, 1 + scale, gate for norm1 (attention); then for norm2 (the MLP).
  const Tensor image_mod = modulation(w.image_modulation, conditioning);
  const Tensor text_mod = modulation(w.text_modulation, conditioning);

  Tensor image_normed = ops::modulated_layer_norm(image, image_mod.select(0, 0),
                                                  image_mod.select(0, 1), kEps, compute);
  Tensor text_normed =
      ops::modulated_layer_norm(text, text_mod.select(0, 0), text_mod.select(0, 1), kEps, compute);
  Tensor attended;
  {
    const FluxRopeTables text_rope = rope.rows(0, text_tokens);
    const FluxRopeTables image_rope = rope.rows(text_tokens, tokens);
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

  // Residual under the attention gate, then norm2's modulated norm, in one op.
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

}  // namespace mmgen::dit
