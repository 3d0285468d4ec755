// The single place where the FLUX transformer runs attention. Each block's joint attention over
// [text, image] (double-stream and single-stream blocks alike) comes through flux_attention(),
// which hands it to the backend the pipeline built for that layer (attention/backend.h). The model
// never chooses a backend; without one it runs the dense reference. Items of a batch run one at a
// time over their own tokens: FLUX attends to every token, text padding included (the pipeline
// passes no mask), so no key mask exists.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "attention/backend.h"
#include "attention/device_attention.h"
#include "core/tensor.h"

namespace mmgen::dit {

enum class FluxStage { Double, Single };

struct FluxLayerAttention {
  std::unique_ptr<attention::AttentionBackend> backend;  // null: dense reference
  // What a stateful backend keeps across steps, one per batch item.
  std::vector<attention::LayerState> item_state;
};

// The attention of a run, built once by the pipeline and reused by every step. An empty stack runs
// the dense reference for all its layers.
struct FluxAttention {
  std::vector<FluxLayerAttention> double_layers, single_layers;
  attention::AttentionStats stats;
  attention::GpuAttention gpu;  // a GPU run: the plan's dense kernel
};

struct FluxAttentionCall {
  FluxStage stage = FluxStage::Double;
  int64_t layer = 0;  // index within the stage's stack
  int64_t num_layers = 1;
  int64_t item = 0;
  int64_t text_tokens = 0;  // the sequence starts with them
  float timestep = 0;
  int64_t step_index = 0;
  int64_t step_count = 1;
  FluxAttention* attention = nullptr;  // null: dense reference
};

// q, k, v [1, tokens, heads, head_dim] of one item (float32 on the CPU; bf16 on the GPU).
// Returns [1, tokens, heads, head_dim] = softmax(q·kᵀ/√head_dim)·v as the layer's backend computes
// it.
Tensor flux_attention(const Tensor& q, const Tensor& k, const Tensor& v,
                      const FluxAttentionCall& call);

}  // namespace mmgen::dit
