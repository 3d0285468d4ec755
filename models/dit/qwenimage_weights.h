// The Qwen-Image transformer's tensors (diffusers' QwenImageTransformer2DModel names): their
// shapes, checked up front (each failure one line naming the tensor and the checkpoint), and where
// each lives while the model runs. The layout follows FLUX's (flux_weights.h), whose FluxLinear it
// shares: on the CPU products stay memory-mapped as stored and a block's are read as the forward
// reaches it; on the GPU set_device uploads them once, products in the compute dtype (bf16), the
// rest float32.
//
// Every adaLN product's bias has 1 added to its scale chunks when loaded, so the product yields
// 1 + scale directly, which is what ops::modulated_layer_norm reads.
#pragma once

#include <cstdint>

#include "core/safetensors.h"
#include "models/dit/flux_weights.h"
#include "models/dit/qwenimage_config.h"

namespace mmgen::dit {

// A QwenImageTransformerBlock: image and text streams with their own weights meeting in one
// joint attention (an MMDiT double-stream block, as FLUX's).
struct QwenImageBlockWeights {
  // img_mod / txt_mod: [6·dim] = shift, 1 + scale, gate for attention, then for the MLP.
  FluxLinear image_modulation, text_modulation;
  FluxLinear to_q, to_k, to_v, to_out, add_q, add_k, add_v, add_out;
  Tensor norm_q, norm_k, norm_added_q, norm_added_k;  // per-head RMSNorm [head_dim]
  FluxLinear image_mlp_in, image_mlp_out, text_mlp_in, text_mlp_out;

  static QwenImageBlockWeights load(const WeightStore& store, int64_t layer);
  QwenImageBlockWeights placed(Device device, DType compute) const;
  size_t bytes() const;
};

// Everything outside the blocks.
struct QwenImageOuterWeights {
  FluxLinear image_in, text_in;  // img_in, txt_in
  Tensor text_norm;              // txt_norm: RMSNorm [joint_attention_dim] on the text input
  // QwenTimestepProjEmbeddings' TimestepEmbedding: a two-layer MLP on the timestep's sinusoid.
  FluxLinear time_1, time_2;
  FluxLinear norm_out;  // AdaLayerNormContinuous: [2·dim] = 1 + scale, shift
  FluxLinear proj_out;

  static QwenImageOuterWeights load(const WeightStore& store);
  QwenImageOuterWeights placed(Device device, DType compute) const;
  size_t bytes() const;
};

// Checks every tensor the config implies.
void check_qwenimage_weights(const WeightStore& store, const QwenImageConfig& config);

}  // namespace mmgen::dit
