#include "models/dit/qwenimage/qwenimage_block.h"

#include "models/dit/mmdit/mmdit_joint_block.h"

namespace mmgen::dit {

void run_qwenimage_block(Tensor& text, Tensor& image, const QwenImageBlockWeights& w,
                         const Tensor& conditioning, const QwenImageConfig& config,
                         const FluxRopeTables& rope, DType compute, const attention::Call& call) {
  // _modulate's chunks and the attention processor's order (norm_q, then apply_rotary_emb_qwen)
  // are FLUX's.
  run_mmdit_joint_block(text, image, w, conditioning,
                        {config.num_attention_heads, config.attention_head_dim}, rope, compute,
                        call, "Qwen-Image block");
}

}  // namespace mmgen::dit
