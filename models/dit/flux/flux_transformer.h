// FluxTransformer2DModel (FLUX.1 dev and schnell), written once over the device-neutral ops
// (core/ops.h) and run where set_device() puts it (the CPU in float32 by default).
//
// A forward takes each item's packed latents (2x2 latent patches as tokens, FluxPipeline's
// _pack_latents) and T5 text, and runs: x / context embedders; the conditioning vector from the
// timestep, the guidance (dev) and CLIP's pooled text; the double-stream blocks on the separate
// text and image streams; the single-stream blocks on [text, image]; the continuous adaLN norm
// and projection of the image tokens.
#pragma once

#include <memory>
#include <string_view>
#include <vector>

#include "attention/layer.h"
#include "core/safetensors.h"
#include "models/dit/flux/flux_bfl_names.h"
#include "models/dit/flux/flux_config.h"
#include "models/dit/flux/flux_rope.h"
#include "models/dit/flux/flux_weights.h"

namespace mmgen::dit {

// The model's two stacks of attention layers, named as the checkpoint names their blocks.
inline constexpr std::string_view kFluxDoubleStack = "transformer_blocks";
inline constexpr std::string_view kFluxSingleStack = "single_transformer_blocks";

struct FluxItem {
  Tensor image;   // [image tokens, in_channels] on the host: packed latents
  Tensor text;    // [text tokens, joint_attention_dim] on the host: T5's output
  Tensor pooled;  // [pooled_projection_dim] on the host: CLIP's pooled output
  // What FluxPipeline passes: the scheduler's timestep / 1000 (the model multiplies by 1000).
  float timestep = 0;
  float guidance = 0;  // the guidance scale (a dev model embeds it; schnell ignores it)
  // The packed grid the image tokens fill, row-major (latent height / 2, width / 2).
  int64_t rows = 0, columns = 0;
};

struct FluxStep {
  int64_t index = 0;
  int64_t count = 1;
};

class FluxTransformer {
 public:
  // Checks every tensor the config implies (names, shapes, float dtypes) up front.
  FluxTransformer(FluxConfig config, WeightStore weights);
  // A diffusers `transformer/` folder: config.json and the safetensors (one file or shards with
  // their index).
  static FluxTransformer load(const fs::path& folder);

  const FluxConfig& config() const { return config_; }
  const WeightStore& weights() const { return weights_; }
  // Its attention layers, for the attention builder: every block's joint self-attention over
  // [text, image], named as the checkpoint names the blocks.
  std::vector<attention::StackTraits> attention_stacks() const;

  // Runs the model on `device` from now on; `compute` is the dtype the GPU's products read
  // (bf16; the CPU computes in float32). Moving to the GPU uploads every weight once.
  void set_device(Device device, DType compute = DType::BF16);
  Device device() const { return resident_.device; }
  size_t resident_weight_bytes() const { return resident_.bytes; }
  // Every tensor of the checkpoint as the model reads it (host copies, loaded block by block),
  // under its checkpoint name (models/parameters.h): the model's tree for what works by name.
  void list_parameters(const models::ParameterVisitor& visit) const;
  // A LoRA layer named in the original release's layout as the modules it changes
  // (lora/lora_file.h).
  std::vector<lora::LoraTarget> lora_targets(const std::string& original) const {
    return flux_lora_targets(original, config_.dim());
  }

  // One prediction per item, [image tokens, out_channels] float32 on the host. `attention` holds
  // the layers the pipeline built for the run's device (null: the dense reference).
  std::vector<Tensor> forward(const std::vector<FluxItem>& batch, const FluxStep& step = {},
                              attention::Layers* attention = nullptr) const;

 private:
  // SiLU(temb) [1, dim] in the compute dtype on the model's device.
  Tensor conditioning(const FluxItem& item) const;
  FluxDoubleBlockWeights double_block(int64_t layer) const;
  FluxSingleBlockWeights single_block(int64_t layer) const;

  FluxConfig config_;
  WeightStore weights_;
  FluxOuterWeights host_outer_;
  // Where the model runs (models::move_model's state): the GPU's resident weights, empty on the
  // CPU, which reads blocks as the forward goes.
  struct Resident {
    Device device = Device::CPU;
    DType compute = DType::F32;
    std::vector<FluxDoubleBlockWeights> double_blocks;
    std::vector<FluxSingleBlockWeights> single_blocks;
    FluxOuterWeights outer;
    size_t bytes = 0;
  };
  Resident resident_;
  // Each item layout's RoPE tables on the model's device; emptied by set_device.
  std::shared_ptr<FluxRopeCache> rope_cache_ = std::make_shared<FluxRopeCache>();
};

}  // namespace mmgen::dit
