// The double-stream (joint) block FLUX and Qwen-Image share: FLUX's FluxTransformerBlock and
// Qwen-Image's QwenImageTransformerBlock compute the same thing from the same tensors, stored under
// a few different names.
//
// Text and image each have their own adaLN-Zero modulation, q/k/v (with per-head q/k RMSNorm),
// output projection and tanh-GELU MLP; the two meet in one attention over [text, image] (text
// first, as both attention processors concatenate them). The streams are float32 where they live;
// the products read `compute` (float32 on the CPU, bf16 on the GPU).
#pragma once

#include <cstdint>
#include <string>

#include "attention/layer.h"
#include "core/safetensors.h"
#include "core/tensor.h"
#include "models/dit/flux/flux_rope.h"
#include "models/dit/mmdit/mmdit_layers.h"

namespace mmgen::dit {

// The tensor names of a joint block, below its prefix, that differ between the models (the
// attention's are the same: attn.to_q, attn.add_q_proj, attn.norm_added_q, ...).
struct MMDiTJointBlockNames {
  std::string image_modulation, text_modulation;  // the adaLN products
  std::string image_mlp, text_mlp;                // FeedForwards: <mlp>.net.0.proj, <mlp>.net.2
};

// A joint block's sizes: the model's width, a head's, the MLPs' hidden width.
struct MMDiTJointBlockShape {
  int64_t dim = 0, head_dim = 0, mlp_dim = 0;
};

struct MMDiTJointBlockWeights {
  int64_t head_dim = 0;
  // [6·dim] = shift, 1 + scale, gate for attention, then for the MLP.
  FluxLinear image_modulation, text_modulation;
  FluxLinear to_q, to_k, to_v, to_out, add_q, add_k, add_v, add_out;
  Tensor norm_q, norm_k, norm_added_q, norm_added_k;  // per-head RMSNorm [head_dim]
  FluxLinear image_mlp_in, image_mlp_out, text_mlp_in, text_mlp_out;
  MMDiTJointBlockNames names;  // what the model calls the tensors whose names differ

  // A block of these sizes and names, no tensor loaded (models/parameters.h).
  static MMDiTJointBlockWeights shaped(const MMDiTJointBlockNames& names,
                                       MMDiTJointBlockShape shape);
  // `shaped` loaded from below `prefix` (the block's, e.g. "transformer_blocks.3."), 1 added to
  // the adaLN products' scales.
  static MMDiTJointBlockWeights load(const WeightStore& store, const std::string& prefix,
                                     MMDiTJointBlockWeights shaped);
  void parameters(const models::ParameterVisitor& visit);  // named as below the block's prefix
};

// `text` [text tokens, dim] and `image` [image tokens, dim] float32, updated in place.
// `conditioning` is SiLU(temb) [1, dim] in `compute` on the streams' device (what both adaLN
// products read); `rope` holds the joint sequence's tables, text rows first. `block` names the
// block in errors ("FLUX double block").
void run_mmdit_joint_block(Tensor& text, Tensor& image, const MMDiTJointBlockWeights& weights,
                           const Tensor& conditioning, MMDiTHeads heads, const FluxRopeTables& rope,
                           DType compute, const attention::Call& call, const char* block);

}  // namespace mmgen::dit
