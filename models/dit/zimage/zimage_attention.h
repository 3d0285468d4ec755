// The single place where the Z-Image transformer runs attention. Every block's self-attention
// (noise refiner, context refiner, main blocks) comes through zimage_attention(), which hands it
// to the backend the pipeline built for that layer (attention/backend.h) with the call's context.
// The model never chooses a backend; without one it runs the dense reference.
//
// Items of a batch run one at a time over their own tokens, so no key mask is needed: diffusers
// masks only the batch padding that makes its items equally long (pad_sequence), never the
// 32-multiple padding tokens inside an item, which every query attends to.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <vector>

#include "attention/backend.h"
#include "attention/device_attention.h"
#include "core/communicator.h"
#include "core/tensor.h"

namespace mmgen::dit {

// The three block stacks, in the order a forward runs them.
enum class ZImageStage { NoiseRefiner, ContextRefiner, Main };

struct ZImageLayerAttention {
  std::unique_ptr<attention::AttentionBackend> backend;  // null: dense reference
  // What a stateful backend keeps across steps, one per batch item (classifier-free guidance
  // runs its two prompts as two items); grown as items appear.
  std::vector<attention::LayerState> item_state;
};

// The attention of a run, built once by the pipeline and reused by every step. An empty stack
// runs the dense reference for all its layers.
struct ZImageAttention {
  std::vector<ZImageLayerAttention> noise_refiner, context_refiner, layers;
  attention::AttentionStats stats;  // summed over the calls that went through a backend
  // A GPU run: the plan's dense kernel (the CPU backends above stay null).
  attention::GpuAttention gpu;
};

// Ulysses sequence parallel (`mmgen generate --gpus N`): this rank holds its shard of the rows of
// the sequence a call attends over; attention exchanges them for the whole sequence and a share
// of the heads (attention/ulysses.h).
struct ZImageSequenceParallel {
  dist::Communicator* group = nullptr;
  dist::SequenceShards shards;
  int64_t rows() const { return shards.sizes[size_t(group->rank())]; }
  int64_t offset() const { return shards.offsets[size_t(group->rank())]; }
};

struct ZImageAttentionCall {
  ZImageStage stage = ZImageStage::Main;
  int64_t layer = 0;  // index within the stage's stack
  int64_t num_layers = 1;
  int64_t item = 0;  // batch item
  // The item's patch grid when the sequence starts with its image tokens (noise refiner, main
  // blocks); zeros for the caption-only context refiner.
  std::array<int64_t, 3> grid{0, 0, 0};
  float timestep = 0;  // the value the model was given, for backends that read it
  int64_t step_index = 0;
  int64_t step_count = 1;
  ZImageAttention* attention = nullptr;              // null: dense reference
  const ZImageSequenceParallel* sequence = nullptr;  // null: this rank holds every row
};

// q, k, v [1, tokens, heads, head_dim] of one item (float32 on the CPU; bf16 on the GPU).
// Returns [1, tokens, heads, head_dim], softmax(q·kᵀ/√head_dim)·v as the layer's backend
// computes it, over all of the item's tokens (under sequence parallel: q, k, v and the result
// are this rank's rows).
Tensor zimage_attention(const Tensor& q, const Tensor& k, const Tensor& v,
                        const ZImageAttentionCall& call);

}  // namespace mmgen::dit
