// The Qwen-Image transformer's tensors (diffusers' QwenImageTransformer2DModel names): their
// shapes, checked up front (each failure one line naming the tensor and the checkpoint), and where
// each lives while the model runs. The layout follows FLUX's (flux_weights.h), and the checks and
// loads are the ones FLUX uses (mmdit_layers.h, FluxLinear too): on the CPU products stay
// memory-mapped as stored and a block's are read as the forward reaches it; on the GPU set_device
// uploads them once, products in the compute dtype (bf16), the rest float32.
//
// Every adaLN product's bias has 1 added to its scale chunks when loaded, so the product yields
// 1 + scale directly, which is what ops::modulated_layer_norm reads.
#pragma once

#include <cstdint>

#include "core/safetensors.h"
#include "models/dit/mmdit/mmdit_joint_block.h"
#include "models/dit/mmdit/mmdit_layers.h"
#include "models/dit/qwenimage/qwenimage_config.h"

namespace mmgen::dit {

// A QwenImageTransformerBlock: image and text streams with their own weights meeting in one
// joint attention, FLUX's double-stream block (mmdit_joint_block.h) with its adaLN products
// img_mod.1 and txt_mod.1 and its MLPs img_mlp and txt_mlp.
using QwenImageBlockWeights = MMDiTJointBlockWeights;
QwenImageBlockWeights load_qwenimage_block(const WeightStore& store, int64_t layer,
                                           const QwenImageConfig& config);

// Everything outside the blocks.
struct QwenImageOuterWeights {
  FluxLinear image_in, text_in;  // img_in, txt_in
  Tensor text_norm;              // txt_norm: RMSNorm [joint_attention_dim] on the text input
  int64_t text_norm_dim = 0;
  // QwenTimestepProjEmbeddings' TimestepEmbedding: a two-layer MLP on the timestep's sinusoid.
  FluxLinear time_1, time_2;
  FluxLinear norm_out;  // AdaLayerNormContinuous: [2·dim] = 1 + scale, shift
  FluxLinear proj_out;

  static QwenImageOuterWeights shaped(const QwenImageConfig& config);
  static QwenImageOuterWeights load(const WeightStore& store, const QwenImageConfig& config);
  void parameters(const models::ParameterVisitor& visit);
};

// Checks every tensor the config implies.
void check_qwenimage_weights(const WeightStore& store, const QwenImageConfig& config);

// Every tensor of the checkpoint as the model reads it (host copies, loaded block by block),
// under its checkpoint name: the model's tree for what works by name (tests, LoRA).
void list_qwenimage_parameters(const WeightStore& store, const QwenImageConfig& config,
                               const models::ParameterVisitor& visit);

}  // namespace mmgen::dit
