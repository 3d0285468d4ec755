// FLUX's two block kinds over one item's residual streams, where the streams live (float32; the
// products read `compute`: float32 on the CPU, bf16 on the GPU).
//
// A double-stream block (FluxTransformerBlock) keeps text and image apart: each has its own
// adaLN-Zero modulation, q/k/v (with per-head q/k RMSNorm), output projection and GELU MLP; the two
// meet in one attention over [text, image] (the joint block Qwen-Image shares,
// mmdit_joint_block.h). A single-stream block (FluxSingleTransformerBlock) runs on [text, image] as
// one stream: one modulated norm feeds attention and a GELU MLP side by side, and one projection of
// both (split in two column blocks) joins the residual under a gate.
#pragma once

#include "attention/layer.h"
#include "core/tensor.h"
#include "models/dit/flux/flux_config.h"
#include "models/dit/flux/flux_rope.h"
#include "models/dit/flux/flux_weights.h"

namespace mmgen::dit {

// `conditioning` is SiLU(temb) [1, dim] in `compute` on the streams' device (what every adaLN
// product reads); `rope` holds the joint sequence's tables, text rows first.
void run_flux_double_block(Tensor& text, Tensor& image, const FluxDoubleBlockWeights& weights,
                           const Tensor& conditioning, const FluxConfig& config,
                           const FluxRopeTables& rope, DType compute, const attention::Call& call);

// `joint` [text + image tokens, dim], text rows first.
void run_flux_single_block(Tensor& joint, const FluxSingleBlockWeights& weights,
                           const Tensor& conditioning, const FluxConfig& config,
                           const FluxRopeTables& rope, DType compute, const attention::Call& call);

}  // namespace mmgen::dit
