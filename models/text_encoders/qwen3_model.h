// The Qwen3 decoder stack (transformers' Qwen3Model / Qwen3ForCausalLM): token embedding, then
// per layer RMSNorm → attention (q/k/v projections, per-head q/k RMSNorm, rotate-half RoPE,
// grouped-query causal attention, output projection) → residual, RMSNorm → SwiGLU MLP →
// residual; a final RMSNorm and, for the causal LM, the LM head. Written once over the
// device-neutral ops (core/ops.h) and run where set_device() puts it, as UMT5Encoder: on the CPU
// in float32 with the weights in their stored dtype (often bf16, memory-mapped), converted as
// each layer uses them; on the GPU with the products' weights resident in bf16 (norms float32),
// the residual stream float32, q/k/v rounded to bf16 once for attention (the paged backends' KV
// pool is bf16), and the token embedding and LM head on the host (large tables of which a prompt
// needs a few rows; logits are a decoding check, not Z-Image's path).
//
// Checkpoints come as Qwen3ForCausalLM (`model.*` plus `lm_head.weight`) or as a bare Qwen3Model
// (no `model.` prefix, no LM head: Z-Image's text_encoder). Attention goes through one
// CausalAttention object per forward, so the paged backends can replace the dense reference.
//
// With a "qwen2_5_vl" config (Qwen3Config's qkv_bias / qk_norm switches) it is the language model
// of Qwen2_5_VLForConditionalGeneration (Qwen-Image's text encoder): q/k/v biases, no q/k norm,
// weights under `model.` or `model.language_model.`; the vision tower (`visual.*`) is not read,
// as text-only prompts never reach it.
#pragma once

#include <memory>
#include <vector>

#include "core/safetensors.h"
#include "core/tensor.h"
#include "models/parameters.h"
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

  // Moves the weights to `device`: the GPU holds them in `compute` (bf16 only: the KV pool and
  // the decode path are bf16), the CPU maps them as stored again and computes in float32.
  void set_device(Device device, DType compute = DType::BF16);
  Device device() const { return state_.device; }
  DType compute_dtype() const { return state_.compute; }
  // Bytes of weights resident on the model's device (0 on the CPU: they stay mapped).
  size_t resident_weight_bytes() const { return state_.bytes; }
  // Every tensor the model holds, where it holds it, under its checkpoint name
  // (models/parameters.h): the model's tree for what works by name.
  void list_parameters(const models::ParameterVisitor& visit) const;
  // Whether logits can be computed (an LM head, or tied embeddings).
  bool has_lm_head() const { return state_.lm_head.defined(); }

  // A dense attention fitting this model (CPU only); keep_kv for forwards that extend earlier
  // ones. On the GPU attention goes through a paged runner (qwen3_paged.h), and so does a model
  // with dual chunk attention on either device (dual_chunk_flash_attn).
  std::unique_ptr<DenseCausalAttention> dense_attention(bool keep_kv) const;

  // Runs the first `layers` decoder layers (0 ≤ layers ≤ num_hidden_layers) on a packed batch:
  // `ids` holds each sequence's new tokens in order, `batch` their counts and cached prefixes.
  // Returns transformers' hidden_states[layers] for the new tokens, [T, hidden] float32 on the
  // model's device (index 0 is the embedding output; the final norm is not applied).
  Tensor forward_layers(const std::vector<int64_t>& ids, const CausalBatch& batch,
                        CausalAttention& attention, int64_t layers) const;
  // Decoder layers [begin, end) on hidden rows x [T, hidden] of the forward `attention` is in
  // (begin_forward already called); positions per row. For callers that keep an intermediate
  // hidden state and then go on (a paged forward caching hidden_states[-2] rows). x's storage
  // is updated in place (a Tensor shares it): copy it first to keep the input. x float32 on the
  // model's device (moved there when it is not); returns there.
  Tensor apply_layers(Tensor x, const std::vector<int64_t>& positions, CausalAttention& attention,
                      int64_t begin, int64_t end) const;
  // The final RMSNorm (what transformers returns as last_hidden_state / hidden_states[-1]), on
  // the model's device.
  Tensor final_norm(const Tensor& hidden) const;
  // LM logits [rows, vocab] of final-normed hidden rows [rows, hidden], float32 on the host.
  Tensor logits(const Tensor& normed_hidden) const;

  // transformers' hidden_states[index] for one unpadded sequence, [tokens, hidden]; index counts
  // from the end when negative (-1 is after the final norm, -2 the second-to-last layer's output).
  // Float32 on the host. On the GPU it runs through a paged runner sized to the prompt.
  Tensor hidden_state(const std::vector<int64_t>& ids, int64_t index) const;

 private:
  // CPU: stored dtype, mapped; GPU: products' weights in the compute dtype, norms and biases
  // float32.
  struct Layer {
    int64_t hidden_size = 0, intermediate_size = 0, q_width = 0, kv_width = 0, head_dim = 0;
    bool has_qkv_bias = false, has_o_bias = false, has_qk_norm = false;  // as the config says
    Tensor input_norm, q, k, v, o, q_bias, k_bias, v_bias, o_bias, q_norm, k_norm;
    Tensor post_attention_norm, gate, up, down;
    void parameters(const models::ParameterVisitor& visit);  // below "<prefix>layers.N."
  };
  // What the model holds where it runs (models::move_model's state).
  struct Placed {
    Device device = Device::CPU;
    DType compute = DType::F32;
    int64_t vocab_size = 0, hidden_size = 0;
    std::string prefix;  // the decoder's in the checkpoint: "model.", "" ...
    Tensor embedding;    // [vocab, hidden], stored dtype, on the host
    std::vector<Layer> layers;
    Tensor norm;
    Tensor lm_head;  // undefined for a bare Qwen3Model with untied embeddings; on the host
    bool lm_head_stored = false;  // the checkpoint has lm_head.weight
    bool tied_lm_head = false;    // lm_head is the embedding
    size_t bytes = 0;
    void parameters(const models::ParameterVisitor& visit);  // checkpoint names
  };

  // The config's shapes under the checkpoint's prefix, no tensor loaded (models/parameters.h).
  Placed shaped_state() const;
  // Every weight from the store, as mapped, after checking names, dtypes and shapes.
  Placed host_state() const;
  // Float32 [T, hidden] on the host: only the prompt's rows are converted.
  Tensor embed(const std::vector<int64_t>& ids) const;
  // The RoPE tables of one forward: the keys' (and plain queries'); with dual chunk attention
  // (config_.dual_chunk) the keys' sit at position % chunk_len and `queries` holds the three
  // query rotations, 3·T rows (token t's intra, succ and inter at rows 3t, 3t + 1, 3t + 2).
  struct ForwardRope {
    RopeTables keys, queries;
  };
  ForwardRope forward_rope(const std::vector<int64_t>& positions) const;
  Tensor self_attention(int64_t index, const Tensor& x, const ForwardRope& rope,
                        CausalAttention& attention) const;
  Tensor mlp(const Layer& layer, const Tensor& x) const;

  Qwen3Config config_;
  WeightStore weights_;
  RotaryEmbedding rope_;
  Placed state_;
};

}  // namespace mmgen::text_encoders
