// The FLUX transformer's tensors (diffusers' FluxTransformer2DModel names): their shapes, checked
// up front through models/parameters.h (each failure one line naming the tensor and the
// checkpoint), and where each lives while the model runs.
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
#include "models/dit/flux/flux_config.h"
#include "models/dit/mmdit/mmdit_joint_block.h"
#include "models/dit/mmdit/mmdit_layers.h"

namespace mmgen::dit {

// A double-stream block (FluxTransformerBlock): the image and the text streams have their own
// weights and meet in one joint attention; the block Qwen-Image shares (mmdit_joint_block.h), its
// adaLN products norm1 and norm1_context, its MLPs ff and ff_context.
using FluxDoubleBlockWeights = MMDiTJointBlockWeights;
FluxDoubleBlockWeights load_flux_double_block(const WeightStore& store, int64_t layer,
                                              const FluxConfig& config);

// A single-stream block (FluxSingleTransformerBlock) over [text, image] together: attention and
// an MLP side by side from one modulated norm, joined by one output projection. That projection
// reads [attention, mlp] concatenated; it is kept as its two column blocks, so the concatenation
// is never built.
struct FluxSingleBlockWeights {
  int64_t dim = 0, head_dim = 0, mlp_dim = 0;
  FluxLinear modulation;  // [3·dim]: shift, 1 + scale, gate
  FluxLinear to_q, to_k, to_v, mlp_in;
  Tensor norm_q, norm_k;
  // proj_out.weight [dim, dim + mlp_dim] as the checkpoint holds it, until load() cuts it into
  // its columns [dim, dim] and [dim, mlp_dim] (and releases it).
  Tensor out;
  Tensor out_attention, out_mlp;
  Tensor out_bias;

  static FluxSingleBlockWeights shaped(const FluxConfig& config);
  static FluxSingleBlockWeights load(const WeightStore& store, int64_t layer,
                                     const FluxConfig& config);
  // Named below the block's prefix. Shaped, proj_out.weight whole; loaded, its two column blocks
  // as "proj_out.weight[attention]" and "proj_out.weight[mlp]".
  void parameters(const models::ParameterVisitor& visit);
};

// Everything outside the blocks.
struct FluxOuterWeights {
  bool guidance = false;  // the guidance embedder is there (FLUX.1-dev; not schnell)
  FluxLinear x_embedder, context_embedder;
  // CombinedTimestep(Guidance)TextProjEmbeddings: two-layer MLPs on the timestep's and the
  // guidance's sinusoids and on CLIP's pooled text; guidance undefined for schnell.
  FluxLinear time_1, time_2, guidance_1, guidance_2, text_1, text_2;
  FluxLinear norm_out;  // AdaLayerNormContinuous: [2·dim] = 1 + scale, shift
  FluxLinear proj_out;

  static FluxOuterWeights shaped(const FluxConfig& config);
  static FluxOuterWeights load(const WeightStore& store, const FluxConfig& config);
  void parameters(const models::ParameterVisitor& visit);
};

// Checks every tensor the config implies.
void check_flux_weights(const WeightStore& store, const FluxConfig& config);

// Every tensor of the checkpoint as the model reads it (host copies, loaded block by block),
// under its checkpoint name: the model's tree for what works by name (tests, LoRA).
void list_flux_parameters(const WeightStore& store, const FluxConfig& config,
                          const models::ParameterVisitor& visit);

}  // namespace mmgen::dit
