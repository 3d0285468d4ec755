// One WanTransformerBlock: modulated self-attention with q/k RMSNorm and 3-D RoPE, cross-attention
// to the text tokens, and a modulated GELU-tanh feed-forward, each added back to the residual.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "attention/layer.h"
#include "core/safetensors.h"
#include "models/dit/wan/wan_rope.h"
#include "models/dit/wan/wan_transformer_config.h"
#include "models/parameters.h"

namespace mmgen::dit {

// One attention layer's projections, on the model's device (see WanBlockWeights).
struct WanAttentionWeights {
  int64_t dim = 0;  // the inner dim: every projection is [dim, dim]
  Tensor q_weight, q_bias, k_weight, k_bias, v_weight, v_bias, out_weight, out_bias;
  Tensor norm_q, norm_k;  // RMSNorm weights over the whole inner dim
  void parameters(const models::ParameterVisitor& visit);  // "to_q.weight", ... "norm_k.weight"
};

// A block's weights where the model runs. On the CPU, float32: loaded (converted from bf16
// where stored so) just before the block runs and released after it, so only one block's float32
// copy is ever resident. On the GPU, resident: the products' weights in the compute dtype (or, for
// FP8 products, f8_e4m3_rows: e4m3 with one scale per output channel), each bias in its product's
// output dtype, norms float32.
struct WanBlockWeights {
  int64_t dim = 0, ffn_dim = 0;
  bool cross_attn_norm = false;  // the cross-attention's affine pre-norm (norm2) is there
  WanAttentionWeights self_attention, cross_attention;
  Tensor norm2_weight, norm2_bias;  // only with cross_attn_norm
  Tensor ffn_in_weight, ffn_in_bias, ffn_out_weight, ffn_out_bias;
  Tensor modulation;  // scale_shift_table [1, 6, D], float32 on the host
  // What the products after the block's norms read, so what those norms write: the compute
  // dtype, or f8_e4m3_rows (e4m3 with one scale per token, quantized as the norm writes it) when
  // the weights are FP8.
  DType inputs = DType::F32;

  // A block of `config`'s shapes, no tensor loaded (models/parameters.h).
  static WanBlockWeights shaped(const WanTransformerConfig& config);
  static WanBlockWeights load(const WeightStore& store, int64_t layer,
                              const WanTransformerConfig& config);
  // Named below the block's prefix (diffusers' names: "attn1.to_q.weight", "ffn.net.2.bias").
  void parameters(const models::ParameterVisitor& visit);
  // These float32 weights placed by `rule` (products read rule.compute, or with fp8_products
  // f8_e4m3_rows; a GGUF matrix stays its blocks on the GPU), `inputs` set to match.
  WanBlockWeights placed(const models::PlacementRule& rule) const;

  // Every tensor but the modulation (which stays on the host), in parameters()' order: what the
  // GPU holds of a block, and what a block streamed to it carries (core/weight_stream.h).
  std::vector<Tensor*> device_tensors();
  // The bytes of each of device_tensors() as placed(CUDA, bf16, fp8_products) makes them, from
  // the config (undefined ones absent) and, where `store` is given, the stored types of block
  // `layer`'s products (a GGUF matrix stays its quantized blocks on the GPU).
  static std::vector<uint64_t> gpu_tensor_bytes(const WanTransformerConfig& config,
                                                bool fp8_products,
                                                const WeightStore* store = nullptr,
                                                int64_t layer = 0);
};

// One block's timestep modulation for a forward, each [D] float32 on the model's device: shift,
// scale + 1 and gate of the self-attention, the same three of the feed-forward.
struct WanModulation {
  Tensor shift, scale_plus_one, gate, ffn_shift, ffn_scale_plus_one, ffn_gate;
};

// The self-attention's RoPE rotation for the forward's latent grid: float32 [tokens,
// head_dim / 2] on the model's device (WanRope::pair_tables).
struct WanRopeTables {
  Tensor cos, sin;
};

// Checks that the store holds every tensor of block `layer` with the shape the config implies.
void check_block_weights(const WeightStore& store, int64_t layer,
                         const WanTransformerConfig& config);

// What follows a block: its LayerNorm (no affine part) is scaled by `scale` and shifted by
// `shift`, each [D] float32 on the model's device (the next block's 1 + scale and shift, or the
// output head's), written as `dtype` (what the products after it read).
struct WanNextNorm {
  Tensor scale, shift;
  DType dtype = DType::F32;
};

// The model's two stacks of attention layers (WanTransformer::attention_stacks()).
inline constexpr std::string_view kWanSelfStack = "self";
inline constexpr std::string_view kWanCrossStack = "cross";

// Runs block `call.layer` on x [B, S, D] (float32, the residual stream) in place, where x lives.
// `normed` is this block's modulated pre-norm of x in weights.inputs, the dtype the products read
// (float32 on the CPU; bf16 or f8_e4m3_rows on the GPU): modulated_layer_norm(x, shift,
// scale_plus_one). text is the embedded text [B, L, D] in `compute`, the dtype the products
// write. Returns the pre-norm `next` asks for, of the updated x, in next.dtype: each residual
// update and the norm after it are one op (one pass on the GPU).
Tensor run_wan_block(Tensor& x, const Tensor& normed, const Tensor& text,
                     const WanModulation& modulation, const WanNextNorm& next,
                     const WanBlockWeights& weights, const WanTransformerConfig& config,
                     const WanRopeTables& rope, DType compute, const attention::Call& call);

}  // namespace mmgen::dit
