// One attention layer, as every model sees it: `attention::attend(q, k, v, call)` is the only way
// a transformer runs attention, on every device. A run's `Layers` hold, for each stack of layers
// the model names (Wan's "self" and "cross", FLUX's "double" and "single", ...), one `Layer` per
// block: the backend the attention plan chose for it (attention/backend.h, built for the run's
// device by make_layer_backend), the layer's extra checkpoint weights, its state per guidance
// branch or batch item, and what its calls visited. The model never chooses a backend and never
// names one; without Layers (or for a stack not built) it runs the dense reference.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "attention/backend.h"
#include "attention/repeated_keys.h"
#include "attention/selector.h"
#include "core/communicator.h"
#include "core/tensor.h"

namespace mmgen::attention {

class Layers;

// Ulysses sequence parallel (attention/ulysses.h): this rank holds the rows `shards` gives it of
// the sequence a layer attends over, and shares it with the ranks of `group`.
struct SequenceParallel {
  dist::Communicator* group = nullptr;
  dist::SequenceShards shards;
  int64_t rows() const { return shards.sizes[size_t(group->rank())]; }
  int64_t offset() const { return shards.offsets[size_t(group->rank())]; }
};

// One attention call of a model: which layer, where the run is, and what the sequence holds.
struct Call {
  Layers* layers = nullptr;  // null: the dense reference
  std::string_view stack;    // one of the model's stack names (its attention_stacks())
  int64_t layer = 0;         // index within the stack
  int64_t num_layers = 1;
  bool is_cross = false;  // k and v are the text (cross-attention) rather than the sequence itself
  int64_t step_index = 0, num_steps = 1;  // the denoising step, 0-based, and the run's count
  float timestep = 0;                     // the value the model was given at this step
  // Which of the layer's states the call uses: the guidance branch (0 conditional, 1
  // unconditional) or the batch item, so a stateful backend (SVG2's centroids) keeps one each.
  int64_t branch = 0;
  // The token grid (t, h, w) the sequence starts with after patchify; zeros: none (a caption).
  std::array<int64_t, 3> grid{0, 0, 0};
  // Self-attention: the tokens that are not the grid's (Z-Image's padding and caption after it,
  // FLUX's text before it); cross-attention: the number of text keys.
  int64_t text_length = 0;
  // Multiplies q·k; 0: 1/√head_dim, formed in double and rounded once as torch does.
  float scale = 0;
  // Cross-attention on the host: the text's padding rows are one repeated row computed once
  // (attention/repeated_keys.h); k and v then hold kept_rows(*repeated_tail) keys. Null: all.
  const RepeatedTail* repeated_tail = nullptr;
  // Self-attention: the block's attention input [B, S, D] (what to_q/to_k/to_v read), for a
  // backend with its own learned projections of it (VSA's to_gate_compress). May be null.
  const Tensor* attention_input = nullptr;
  // Sequence parallel: q, k and v hold this rank's rows; self-attention exchanges them for a
  // share of the heads over the whole sequence and back. Null: the whole sequence is here.
  const SequenceParallel* sequence = nullptr;
};

class Layer {
 public:
  Layer() = default;  // the dense reference
  // `backend` may be shared by the layers of a stack (a GPU backend keeps its per-layer state by
  // the call's layer index) or be this layer's own; null: the dense reference.
  explicit Layer(std::shared_ptr<AttentionBackend> backend, LayerWeights weights = {});

  // q [B, Sq, H, D], k and v [B, Sk, H, D]: float32 on the CPU, bf16 on the GPU. Returns
  // [B, Sq, H, D], softmax(q·kᵀ/√D)·v as the layer's backend computes it.
  Tensor forward(const Tensor& q, const Tensor& k, const Tensor& v, const Call& call);

  // Whether a batch element's output is what it would get alone (see AttentionBackend).
  bool batch_elements_alone() const { return !backend_ || backend_->batch_elements_alone(); }
  const AttentionStats& stats() const { return stats_; }
  const LayerWeights& weights() const { return weights_; }
  AttentionBackend* backend() const { return backend_.get(); }

 private:
  std::shared_ptr<AttentionBackend> backend_;
  LayerWeights weights_;
  std::vector<LayerState> states_;  // by the call's branch, grown as branches appear
  AttentionStats stats_;
};

// A transformer's attention for one run, built once (pipeline/attention_layers.h) and reused by
// every step so the layers' states persist.
class Layers {
 public:
  void set_stack(std::string name, std::vector<Layer> layers);
  // The stack's layers; empty when it was not built (its layers run the dense reference).
  const std::vector<Layer>& stack(std::string_view name) const;
  // The layer a call names; the dense reference for a stack that was not built.
  Layer& layer(std::string_view stack, int64_t index);
  // What the stack's calls visited, summed over its layers.
  AttentionStats stats(std::string_view stack) const;
  // Whether every layer attends each batch element alone (the guidance branches may then run as
  // one batch of two).
  bool batch_elements_alone() const;

 private:
  std::map<std::string, std::vector<Layer>, std::less<>> stacks_;
  Layer dense_;
};

// What the attention builder must know of one stack of a model's layers (below).
struct StackTraits;
// Layers with every stack of `stacks` filled by `make` (stack, layer index): tests, benchmarks
// and tools that pick their backends themselves; runs build theirs from the attention plan
// (pipeline/attention_layers.h).
Layers layers_from(const std::vector<StackTraits>& stacks,
                   const std::function<Layer(const StackTraits& stack, int64_t layer)>& make);

// The attention of one call: `call.layers`' layer for it, or the dense reference.
Tensor attend(const Tensor& q, const Tensor& k, const Tensor& v, const Call& call);

// What the attention builder must know of one stack of a model's layers.
struct StackTraits {
  std::string name;
  int64_t layers = 0;
  LayerKind kind = LayerKind::SelfAttention;  // which of the plan's choices its layers take
  // The sequence is the grid's tokens alone (Wan's self-attention): what the GPU backends of the
  // sparse designs take. Other stacks run a dense kernel on the GPU.
  bool video_tokens_only = false;
  // Where block i's extra checkpoint weights live ("blocks." + i + "."); empty: the stack reads
  // none.
  std::string block_prefix;
};

}  // namespace mmgen::attention
