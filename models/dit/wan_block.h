// One WanTransformerBlock: modulated self-attention with q/k RMSNorm and 3-D RoPE, cross-attention
// to the text tokens, and a modulated GELU-tanh feed-forward, each added back to the residual.
#pragma once

#include <cstdint>
#include <string>

#include "core/safetensors.h"
#include "models/dit/wan_attention.h"
#include "models/dit/wan_rope.h"
#include "models/dit/wan_transformer_config.h"

namespace mmgen::dit {

// One attention layer's projections (float32).
struct WanAttentionWeights {
  Tensor q_weight, q_bias, k_weight, k_bias, v_weight, v_bias, out_weight, out_bias;
  Tensor norm_q, norm_k;  // RMSNorm weights over the whole inner dim
};

// A block's weights as float32: loaded (converted from bf16 where stored so) just before the block
// runs and released after it, so only one block's float32 copy is ever resident.
struct WanBlockWeights {
  WanAttentionWeights self_attention, cross_attention;
  Tensor norm2_weight, norm2_bias;  // undefined when cross_attn_norm is false
  Tensor ffn_in_weight, ffn_in_bias, ffn_out_weight, ffn_out_bias;
  Tensor modulation;  // scale_shift_table [1, 6, D]

  static WanBlockWeights load(const WeightStore& store, int64_t layer,
                              const WanTransformerConfig& config);
};

// Checks that the store holds every tensor of block `layer` with the shape the config implies.
void check_block_weights(const WeightStore& store, int64_t layer,
                         const WanTransformerConfig& config);

// Runs block `layer` on x [B, S, D] in place. text is the embedded text [B, L, D];
// timestep_proj holds the 6·D modulation values from the condition embedder (shared by the batch).
void run_wan_block(Tensor& x, const Tensor& text, const float* timestep_proj,
                   const WanBlockWeights& weights, const WanTransformerConfig& config,
                   const WanRope& rope, const WanAttentionCall& call);

}  // namespace mmgen::dit
