// A random-weight WanTransformer3DModel checkpoint of any size, for benchmarks and tests that need
// real dimensions without a download: every tensor the config implies, in bf16, deterministic,
// filled in parallel. Linear weights are scaled by 1/sqrt(fan_in) so activations stay in range.
#pragma once

#include <cstdint>

#include "core/safetensors.h"
#include "core/tensor.h"
#include "models/dit/wan/wan_transformer_config.h"

namespace mmgen::dit {

// Values center + spread * u, u uniform in [-1, 1) from (seed, index), in `dtype` (bf16 or f32).
Tensor random_tensor(const Shape& shape, float center, float spread, uint64_t seed, DType dtype);

NamedTensors random_checkpoint(const WanTransformerConfig& config);

// A random rank-`rank` LoRA in diffusers' names on every linear layer of the blocks (self- and
// cross-attention's q, k, v, out and the feed-forward's two), bf16, its up matrices small enough
// that the outputs stay in range: what the LoRA benchmarks load.
NamedTensors random_lora(const WanTransformerConfig& config, int64_t rank);

// Wan2.1-T2V-1.3B's transformer shapes (12 heads of 128, ffn 8960, text_dim 4096) with `layers`
// blocks (the model has 30): what the benchmarks time.
inline WanTransformerConfig wan21_1_3b_config(int64_t layers = 30) {
  WanTransformerConfig config;
  config.num_attention_heads = 12;
  config.attention_head_dim = 128;
  config.ffn_dim = 8960;
  config.num_layers = layers;
  config.text_dim = 4096;
  return config;
}

}  // namespace mmgen::dit
