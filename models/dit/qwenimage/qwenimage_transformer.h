// QwenImageTransformer2DModel (Qwen-Image), written once over the device-neutral ops (core/ops.h)
// and run where set_device() puts it (the CPU in float32 by default).
//
// A forward takes each item's packed latents (2x2 latent patches as tokens, QwenImagePipeline's
// _pack_latents, as FLUX's) and Qwen2.5-VL text, and runs: img_in on the image; txt_norm (RMSNorm)
// and txt_in on the text; the conditioning vector from the timestep; the double-stream blocks on
// the separate text and image streams; the continuous adaLN norm and projection of the image
// tokens.
#pragma once

#include <memory>
#include <string_view>
#include <vector>

#include "core/safetensors.h"
#include "models/dit/qwenimage/qwenimage_block.h"
#include "models/dit/qwenimage/qwenimage_config.h"
#include "models/dit/qwenimage/qwenimage_rope.h"
#include "models/dit/qwenimage/qwenimage_weights.h"

namespace mmgen::dit {

// The model's one stack of attention layers, named as the checkpoint names its blocks.
inline constexpr std::string_view kQwenImageStack = "transformer_blocks";

struct QwenImageItem {
  Tensor image;  // [image tokens, in_channels] on the host: packed latents
  // [real text tokens, joint_attention_dim] on the host: the prompt's embeddings without the
  // padding. diffusers pads a batch's prompts to one length and masks the padded keys
  // (encoder_hidden_states_mask); an item run alone over its real tokens gives its real rows (and
  // its image) the same numbers, since a masked key contributes nothing to any row. The real tokens
  // must be the prompt's first ones (the pipeline pads on the right), so that their RoPE
  // positions are the same.
  Tensor text;
  // What QwenImagePipeline passes: the scheduler's timestep / 1000 (the model's Timesteps scales
  // by 1000).
  float timestep = 0;
  QwenImageShape shape;  // the packed grid (frames, latent height / 2, width / 2): img_shapes
};

struct QwenImageStep {
  int64_t index = 0;
  int64_t count = 1;
};

class QwenImageTransformer {
 public:
  // Checks every tensor the config implies (names, shapes, float dtypes) up front.
  QwenImageTransformer(QwenImageConfig config, WeightStore weights);
  // A diffusers `transformer/` folder: config.json and the safetensors (one file or shards with
  // their index).
  static QwenImageTransformer load(const fs::path& folder);

  const QwenImageConfig& config() const { return config_; }
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

  // One prediction per item, [image tokens, patch_size² · out_channels] float32 on the host (the
  // packed layout of the input: 64 values per token for Qwen-Image). `attention` holds the layers
  // the pipeline built for the run's device (null: the dense reference).
  std::vector<Tensor> forward(const std::vector<QwenImageItem>& batch,
                              const QwenImageStep& step = {},
                              attention::Layers* attention = nullptr) const;

 private:
  // SiLU(temb) [1, dim] in the compute dtype on the model's device.
  Tensor conditioning(const QwenImageItem& item) const;
  QwenImageBlockWeights block(int64_t layer) const;

  QwenImageConfig config_;
  WeightStore weights_;
  QwenImageOuterWeights host_outer_;
  // Where the model runs (models::move_model's state): the GPU's resident weights, empty on the
  // CPU, which reads blocks as the forward goes.
  struct Resident {
    Device device = Device::CPU;
    DType compute = DType::F32;
    std::vector<QwenImageBlockWeights> blocks;
    QwenImageOuterWeights outer;
    size_t bytes = 0;
  };
  Resident resident_;
  // Each item layout's RoPE tables on the model's device; emptied by set_device.
  std::shared_ptr<FluxRopeCache> rope_cache_ = std::make_shared<FluxRopeCache>();
};

}  // namespace mmgen::dit
