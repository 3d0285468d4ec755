// The single place where the Wan transformer runs attention. Every self- and cross-attention call
// of every block comes through wan_attention(), which hands it to the backend the pipeline built
// for that layer (attention/backend.h) with the call's context: step, layer, latent grid, text
// length. The model never chooses a backend; without one it runs the dense reference.
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

// The backends of one transformer block and what its self-attention backend keeps across steps.
struct WanLayerAttention {
  std::unique_ptr<attention::AttentionBackend> self_attention;   // null: dense reference
  std::unique_ptr<attention::AttentionBackend> cross_attention;  // null: dense reference
  // Extra checkpoint weights of the self-attention backend (VSA's to_gate_compress, SLA's proj_l),
  // float32, keyed by the name after the block prefix; empty when the checkpoint has none.
  attention::LayerWeights self_weights;
  // Per classifier-free-guidance branch (SVG2's centroids must not mix the two prompts).
  std::array<attention::LayerState, 2> self_state;
};

// The attention of a run: one entry per block (empty: dense reference everywhere), built once by
// the pipeline and reused by every step so layer states persist.
struct WanAttention {
  std::vector<WanLayerAttention> layers;
  attention::AttentionStats self_attention_stats;  // summed over the run's self-attention calls
  // A GPU run: the plan's dense kernels and the GPU sparse self-attention backend, if any (the
  // per-layer CPU backends above stay null; self_weights hold VSA's gate on the GPU).
  attention::GpuAttention gpu;

  // True when every layer's CPU attention is dense and stateless (the reference, fa or
  // torch_sdpa): such attention gives a batch element the values it gives it alone, so the two
  // guidance branches may run as one batch.
  bool dense_on_cpu() const;
  // True when a GPU run's self-attention is the plan's dense kernel, or a backend that attends
  // each batch element alone (sage_attn): not a sparse backend whose state (SVG2's centroids,
  // counted per guidance branch) follows one branch per call. Then the two branches may run as
  // one batch.
  bool dense_on_gpu() const {
    return !gpu.sparse || attention::sparse_backend_batch_elements_alone(*gpu.sparse);
  }
};

// Where a forward pass sits in the denoising loop.
struct WanStep {
  int64_t index = 0;  // 0-based
  int64_t count = 1;
  int branch = 0;  // 0: conditional prompt, 1: unconditional (classifier-free guidance)
};

// Sequence parallel (Ulysses, attention/ulysses.h): this rank holds the rows `shards` gives it of
// the latent tokens, and shares the sequence with the ranks of `group`.
struct WanSequenceParallel {
  dist::Communicator* group = nullptr;
  dist::SequenceShards shards;
  int64_t rows() const { return shards.sizes[size_t(group->rank())]; }
  int64_t offset() const { return shards.offsets[size_t(group->rank())]; }
};

struct WanAttentionCall {
  int64_t layer = 0;  // block index, 0-based
  int64_t num_layers = 1;
  bool is_cross = false;  // false: latent tokens attend to themselves (with RoPE applied)
  int64_t grid_t = 0;     // latent grid after patchify: tokens are ordered (t, h, w)
  int64_t grid_h = 0;
  int64_t grid_w = 0;
  int64_t text_len = 0;  // number of text tokens (the keys of a cross-attention call)
  // Cross-attention on the host: the text's padding rows are one repeated row, computed once
  // (attention/repeated_keys.h); k and v then hold kept_rows(*repeated_tail) keys. Null: all.
  const attention::RepeatedTail* repeated_tail = nullptr;
  float timestep = 0;  // the scheduler's timestep value of this forward
  WanStep step;
  WanAttention* attention = nullptr;  // null: dense reference attention
  // Self-attention only: the block's attention input (the norm1-modulated hidden states,
  // [B, S, D]), from which a VSA checkpoint's `to_gate_compress` computes its gate.
  const Tensor* attention_input = nullptr;
  // Sequence parallel: q, k, v hold this rank's rows; self-attention exchanges them for a share
  // of the heads over the whole sequence and back. Null: the whole sequence is here.
  const WanSequenceParallel* sequence = nullptr;
};

// q [batch, q_len, heads, head_dim], k and v [batch, kv_len, heads, head_dim], float32, no mask
// (q_len: this rank's rows under sequence parallel, for self-attention k and v too).
// Returns [batch, q_len, heads, head_dim], softmax(q·kᵀ/√head_dim)·v as the layer's backend
// computes it.
Tensor wan_attention(const Tensor& q, const Tensor& k, const Tensor& v,
                     const WanAttentionCall& call);

}  // namespace mmgen::dit
