// QwenImageTransformerBlock over one item's residual streams, where the streams live (float32; the
// products read `compute`: float32 on the CPU, bf16 on the GPU).
//
// The block is an MMDiT double-stream block as FLUX's: text and image each have their own
// adaLN-Zero modulation (img_mod / txt_mod), q/k/v with per-head q/k RMSNorm, output projection and
// tanh-GELU MLP; the two meet in one attention over [text, image] (QwenDoubleStreamAttnProcessor2_0
// concatenates text first). It runs the joint block FLUX's double-stream blocks run
// (mmdit_joint_block.h).
//
// Attention: one item's joint sequence with no key mask, as FLUX's (attention::attend, the stack
// "transformer_blocks").
#pragma once

#include "attention/layer.h"
#include "core/tensor.h"
#include "models/dit/flux/flux_rope.h"
#include "models/dit/qwenimage/qwenimage_config.h"
#include "models/dit/qwenimage/qwenimage_weights.h"

namespace mmgen::dit {

// `text` [text tokens, dim] and `image` [image tokens, dim] float32, updated in place.
// `conditioning` is SiLU(temb) [1, dim] in `compute` on the streams' device (what img_mod and
// txt_mod read); `rope` holds the joint sequence's tables, text rows first.
void run_qwenimage_block(Tensor& text, Tensor& image, const QwenImageBlockWeights& weights,
                         const Tensor& conditioning, const QwenImageConfig& config,
                         const FluxRopeTables& rope, DType compute, const attention::Call& call);

}  // namespace mmgen::dit
