// The FLUX transformer's tensors (diffusers' FluxTransformer2DModel names): their shapes, checked
// up front (each failure one line naming the tensor and the checkpoint), and where each lives
// while the model runs.
//
// On the CPU products stay memory-mapped in their stored dtype (the product converts as it packs)
// and a block's are read as the forward reaches it; biases and norms are float32. On the GPU
// set_device uploads them once: products in the compute dtype (bf16), the rest float32.
//
// Every adaLN product's bias has 1 added to its scale chunks when loaded, so the product yields
// 1 + scale directly, which is what ops::modulated_layer_norm reads.
#pragma once

#include <cstdint>
#include <string>

#include "core/safetensors.h"
#include "models/dit/flux_config.h"

namespace mmgen::dit {

// A linear layer: the weight [out, in] as stored (the CPU) or placed, the bias float32 [out].
struct FluxLinear {
  Tensor weight, bias;
  FluxLinear placed(Device device, DType compute) const;
  size_t bytes() const;
};

// A double-stream block (FluxTransformerBlock): the image and the text streams have their own
// weights and meet in one joint attention.
struct FluxDoubleBlockWeights {
  // AdaLayerNormZero: [6·dim] = shift, 1 + scale, gate for attention, then for the MLP.
  FluxLinear image_modulation, text_modulation;
  FluxLinear to_q, to_k, to_v, to_out, add_q, add_k, add_v, add_out;
  Tensor norm_q, norm_k, norm_added_q, norm_added_k;  // per-head RMSNorm [head_dim]
  FluxLinear image_mlp_in, image_mlp_out, text_mlp_in, text_mlp_out;

  static FluxDoubleBlockWeights load(const WeightStore& store, int64_t layer);
  FluxDoubleBlockWeights placed(Device device, DType compute) const;
  size_t bytes() const;
};

// A single-stream block (FluxSingleTransformerBlock) over [text, image] together: attention and
// an MLP side by side from one modulated norm, joined by one output projection. That projection
// reads [attention, mlp] concatenated; it is kept as its two column blocks, so the concatenation
// is never built.
struct FluxSingleBlockWeights {
  FluxLinear modulation;  // [3·dim]: shift, 1 + scale, gate
  FluxLinear to_q, to_k, to_v, mlp_in;
  Tensor norm_q, norm_k;
  Tensor out_attention, out_mlp;  // proj_out's columns [dim, dim] and [dim, mlp_dim]
  Tensor out_bias;

  static FluxSingleBlockWeights load(const WeightStore& store, int64_t layer);
  FluxSingleBlockWeights placed(Device device, DType compute) const;
  size_t bytes() const;
};

// Everything outside the blocks.
struct FluxOuterWeights {
  FluxLinear x_embedder, context_embedder;
  // CombinedTimestep(Guidance)TextProjEmbeddings: two-layer MLPs on the timestep's and the
  // guidance's sinusoids and on CLIP's pooled text; guidance undefined for schnell.
  FluxLinear time_1, time_2, guidance_1, guidance_2, text_1, text_2;
  FluxLinear norm_out;  // AdaLayerNormContinuous: [2·dim] = 1 + scale, shift
  FluxLinear proj_out;

  static FluxOuterWeights load(const WeightStore& store, const FluxConfig& config);
  FluxOuterWeights placed(Device device, DType compute) const;
  size_t bytes() const;
};

// Checks every tensor the config implies.
void check_flux_weights(const WeightStore& store, const FluxConfig& config);

}  // namespace mmgen::dit
