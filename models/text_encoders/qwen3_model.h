// The Qwen3 decoder stack (transformers' Qwen3Model / Qwen3ForCausalLM), float32 on the CPU:
// token embedding, then per layer RMSNorm → attention (q/k/v projections, per-head q/k RMSNorm,
// rotate-half RoPE, grouped-query causal attention, output projection) → residual, RMSNorm →
// SwiGLU MLP → residual; a final RMSNorm and, for the causal LM, the LM head. Weights stay in
// their stored dtype (often bf16, memory-mapped) and are converted as each layer uses them.
//
// Checkpoints come as Qwen3ForCausalLM (`model.*` plus `lm_head.weight`) or as a bare Qwen3Model
// (no `model.` prefix, no LM head: Z-Image's text_encoder). Attention goes through one
// CausalAttention object per forward, so the paged backends can replace the dense reference.
#pragma once

#include <memory>
#include <vector>

#include "core/safetensors.h"
#include "core/tensor.h"
#include "models/text_encoders/qwen3_attention.h"
#include "models/text_encoders/qwen3_config.h"
#include "models/text_encoders/qwen3_rope.h"

namespace mmgen::text_encoders {

class Qwen3TextModel {
 public:
  // Checks that every weight the config implies is present with the right shape.
  Qwen3TextModel(Qwen3Config config, WeightStore weights);
  // A transformers component folder: config.json and *.safetensors (or a sharded index).
  static Qwen3TextModel from_folder(const fs::path& folder);

  const Qwen3Config& config() const { return config_; }
  // Whether logits can be computed (an LM head, or tied embeddings).
  bool has_lm_head() const { return lm_head_.defined(); }

  // A dense attention fitting this model; keep_kv for forwards that extend earlier ones.
  std::unique_ptr<DenseCausalAttention> dense_attention(bool keep_kv) const;

  // Runs the first `layers` decoder layers (0 ≤ layers ≤ num_hidden_layers) on a packed batch:
  // `ids` holds each sequence's new tokens in order, `batch` their counts and cached prefixes.
  // Returns transformers' hidden_states[layers] for the new tokens, [T, hidden] (index 0 is the
  // embedding output; the final norm is not applied).
  Tensor forward_layers(const std::vector<int64_t>& ids, const CausalBatch& batch,
                        CausalAttention& attention, int64_t layers) const;
  // Decoder layers [begin, end) on hidden rows x [T, hidden] of the forward `attention` is in
  // (begin_forward already called); positions per row. For callers that keep an intermediate
  // hidden state and then go on (a paged forward caching hidden_states[-2] rows). x's storage
  // is updated in place (a Tensor shares it): copy it first to keep the input.
  Tensor apply_layers(Tensor x, const std::vector<int64_t>& positions, CausalAttention& attention,
                      int64_t begin, int64_t end) const;
  // The final RMSNorm (what transformers returns as last_hidden_state / hidden_states[-1]).
  Tensor final_norm(const Tensor& hidden) const;
  // LM logits [rows, vocab] of final-normed hidden rows [rows, hidden].
  Tensor logits(const Tensor& normed_hidden) const;

  // transformers' hidden_states[index] for one unpadded sequence, [tokens, hidden]; index counts
  // from the end when negative (-1 is after the final norm, -2 the second-to-last layer's output).
  Tensor hidden_state(const std::vector<int64_t>& ids, int64_t index) const;

 private:
  struct Layer {
    Tensor input_norm, q, k, v, o, q_bias, k_bias, v_bias, o_bias, q_norm, k_norm;
    Tensor post_attention_norm, gate, up, down;
  };

  Tensor embed(const std::vector<int64_t>& ids) const;
  Tensor self_attention(int64_t index, const Tensor& x, const std::vector<int64_t>& positions,
                        CausalAttention& attention) const;
  Tensor mlp(const Layer& layer, const Tensor& x) const;

  Qwen3Config config_;
  WeightStore weights_;
  RotaryEmbedding rope_;
  Tensor embedding_;  // [vocab, hidden], stored dtype
  std::vector<Layer> layers_;
  Tensor norm_;
  Tensor lm_head_;  // undefined for a bare Qwen3Model with untied embeddings
};

}  // namespace mmgen::text_encoders
