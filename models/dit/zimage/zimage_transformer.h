// ZImageTransformer2DModel, Z-Image's single-stream diffusion transformer, written once over the
// device-neutral ops (core/ops.h) and run where set_device() puts it (the CPU in float32 by
// default; weight handling as in models/dit/zimage/zimage_weights.h).
//
// A forward takes a ragged batch: every item has its own latent size, caption length and
// timestep, and runs over its own tokens only: its image patches then its caption, each padded
// to a multiple of 32 with the learned pad tokens, which is exactly the sequence diffusers builds
// for it (its batch padding is masked out of attention, so items never see each other's).
// Stages, as diffusers runs them: patch embedding and the modulated noise refiner over the image
// tokens; caption RMSNorm + linear and the unmodulated context refiner over the caption tokens;
// the modulated main blocks over [image, caption]; adaLN final layer; unpatchify.
#pragma once

#include <array>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include "attention/layer.h"
#include "core/safetensors.h"
#include "models/dit/zimage/zimage_block.h"
#include "models/dit/zimage/zimage_config.h"
#include "models/dit/zimage/zimage_original_names.h"
#include "models/dit/zimage/zimage_rope.h"
#include "models/dit/zimage/zimage_weights.h"

namespace mmgen::dit {

struct ZImageItem {
  Tensor latents;  // [in_channels, frames, height, width] on the host
  Tensor caption;  // [tokens, cap_feat_dim] on the host: the text encoder's unpadded output
  // What diffusers' pipeline passes: (1000 - scheduler timestep) / 1000; the model multiplies it
  // by t_scale.
  float timestep = 0;
};

// Where a forward sits in the denoising loop (attention backends that change with the step).
struct ZImageStep {
  int64_t index = 0;  // 0-based
  int64_t count = 1;
};

// The timestep MLP: sinusoid(t · t_scale) -> linear -> SiLU -> linear, float32 on the host; the
// adaln_dim values every modulation reads.
std::vector<float> zimage_timestep_embedding(const ZImageOuterWeights& weights,
                                             const ZImageConfig& config, float timestep);

class ZImageTransformer {
 public:
  // Checks every tensor the config implies (names, shapes, float dtypes) up front.
  ZImageTransformer(ZImageConfig config, WeightStore weights);
  // A diffusers `transformer/` folder: config.json and the safetensors weights (one file or
  // shards with their index).
  static ZImageTransformer load(const fs::path& folder);

  const ZImageConfig& config() const { return config_; }
  const WeightStore& weights() const { return weights_; }
  // Its attention layers, for the attention builder: the three stacks' self-attention, named as
  // the checkpoint names them (zimage_stack_name), each over an item's whole sequence.
  std::vector<attention::StackTraits> attention_stacks() const;

  // Runs the model on `device` from now on; `compute` is the dtype the GPU's products read (bf16;
  // the CPU computes in float32). Moving to the GPU uploads every weight once.
  void set_device(Device device, DType compute = DType::BF16);
  Device device() const { return resident_.device; }
  size_t resident_weight_bytes() const { return resident_.bytes; }
  // Every tensor of the checkpoint as the model reads it (host copies, loaded block by block),
  // under its checkpoint name (models/parameters.h): the model's tree for what works by name.
  void list_parameters(const models::ParameterVisitor& visit) const;
  // A LoRA layer named in the original release's layout as the modules it changes
  // (lora/lora_file.h).
  std::vector<lora::LoraTarget> lora_targets(const std::string& original) const {
    return zimage_lora_targets(original, config_.dim);
  }

  // One prediction per item, [in_channels, frames, height, width] float32 on the host.
  // `attention` holds the layers the pipeline built for the run's device (null: the dense
  // reference).
  // `sequence_group` (Ulysses sequence parallel, every rank of it calling with the same batch):
  // the noise refiner and the main blocks run on this rank's rows of each item's image and joint
  // sequences (balanced shards), the short caption refiner on all of them; every rank returns
  // the whole prediction.
  std::vector<Tensor> forward(const std::vector<ZImageItem>& batch, const ZImageStep& step = {},
                              attention::Layers* attention = nullptr,
                              dist::Communicator* sequence_group = nullptr) const;

 private:
  ZImageBlockWeights block_weights(ZImageStage stage, int64_t layer) const;
  // What a block's modulation reads (the resident weights on the GPU; on the CPU only those
  // tensors, mapped).
  ZImageBlockWeights modulation_weights(ZImageStage stage, int64_t layer) const;

  // The RoPE tables of one item layout (its image, caption and joint sequences) on the model's
  // device. They depend on the layout only, so every step of a run and both guidance items reuse
  // them instead of rebuilding and uploading ~100 MB per forward at 1024x1024.
  struct LayoutRope {
    ZImageRopeTables image, caption, joint;
  };
  struct RopeCache {
    std::mutex mutex;
    std::map<std::array<int64_t, 4>, LayoutRope> layouts;  // (frames, height, width, caption)
  };
  const LayoutRope& layout_rope(const ZImageLayout& layout) const;

  ZImageConfig config_;
  WeightStore weights_;
  ZImageRope rope_;
  ZImageOuterWeights host_outer_;  // float32 on the host, converted once
  // Where the model runs (models::move_model's state): the GPU's resident weights, empty on the
  // CPU, which loads blocks as the forward goes.
  struct Resident {
    Device device = Device::CPU;
    DType compute = DType::F32;
    std::vector<ZImageBlockWeights> noise, context, layers;
    ZImageOuterWeights outer;
    // The GPU's adaLN products of the modulated blocks (noise refiner, then main), stacked.
    ZImageStackedModulation stacked_modulation;
    size_t bytes = 0;
  };
  Resident resident_;
  std::shared_ptr<RopeCache> rope_cache_ = std::make_shared<RopeCache>();  // emptied by set_device
};

}  // namespace mmgen::dit
