// WanTransformer3DModel, the Wan2.1 / Wan2.2 text-to-video diffusion transformer, in float32 on the
// CPU. Weights stay memory-mapped in their stored dtype (bf16 for the released checkpoints) and are
// converted to float32 one block at a time as the forward reaches them, so resident memory is
// about the checkpoint's size plus one block's float32 weights and activations.
#pragma once

#include <vector>

#include "core/safetensors.h"
#include "models/dit/wan_attention.h"
#include "models/dit/wan_rope.h"
#include "models/dit/wan_transformer_config.h"

namespace mmgen::dit {

// The condition embedder's time branch for one timestep, in float32 (diffusers keeps it there):
// temb [D] for the output head, timestep_proj [6·D] for the blocks' modulation.
struct TimeConditioning {
  std::vector<float> temb, timestep_proj;
};
// The time branch's weights as float32 (load once, reuse for every step).
struct TimeEmbedderWeights {
  Tensor linear_1_weight, linear_1_bias, linear_2_weight, linear_2_bias, proj_weight, proj_bias;
  static TimeEmbedderWeights load(const WeightStore& store);
};
TimeConditioning time_conditioning(const TimeEmbedderWeights& weights,
                                   const WanTransformerConfig& config, float timestep);

class WanTransformer {
 public:
  // Checks every tensor the config implies (names, shapes, float dtypes) up front.
  WanTransformer(WanTransformerConfig config, WeightStore weights);
  // A diffusers `transformer/` folder: config.json and the safetensors weights.
  static WanTransformer load(const fs::path& folder);

  const WanTransformerConfig& config() const { return config_; }
  const WeightStore& weights() const { return weights_; }

  // latents [B, in_channels, F, H, W] (F, H, W divisible by the patch size), one timestep for the
  // whole batch (the scheduler's value, e.g. 999.0), text_embeds [B, L, text_dim].
  // Returns the prediction [B, out_channels, F, H, W], float32. `step` says where this forward
  // sits in the denoising loop; `attention` holds the per-layer backends the pipeline built (null:
  // the dense reference everywhere) and is passed on to every attention call.
  Tensor forward(const Tensor& latents, float timestep, const Tensor& text_embeds,
                 const WanStep& step = {}, WanAttention* attention = nullptr) const;

 private:
  WanTransformerConfig config_;
  WeightStore weights_;
  WanRope rope_;
};

}  // namespace mmgen::dit
