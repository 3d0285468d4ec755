// CLIP's text encoder (transformers' CLIPTextModel): FLUX.1's `text_encoder`, whose pooled
// output conditions the transformer. Written once over the device-neutral ops (core/ops.h) and
// run where set_device() puts it: on the CPU in float32 with the weights as stored (mapped); on
// the GPU with the products' weights resident in the compute dtype, norms, biases and the
// residual stream in float32, and the token table on the host (only the prompt's rows are used).
//
// Token + learned position embeddings, pre-LN layers (layer_norm1 → q/k/v/out_proj with biases,
// scores scaled by head_dim^-0.5 under a causal mask; layer_norm2 → fc1 → activation → fc2),
// final_layer_norm. Attention runs through a paged backend (attention/paged/) as causal layers of
// a PagedRunner with no prefix cache: the K/V a forward writes are its own and freed at its end.
// FluxPipeline passes no attention mask, so padding tokens are ordinary tokens here.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "attention/paged/paged_runner.h"
#include "core/safetensors.h"
#include "core/tensor.h"
#include "models/lora/lora_file.h"
#include "models/parameters.h"
#include "models/text_encoders/clip_config.h"

namespace mmgen::text_encoders {

class ClipTextModel {
 public:
  // Checks that every weight the config implies is present with the right shape (names with or
  // without transformers' "text_model." prefix).
  ClipTextModel(ClipTextConfig config, WeightStore weights);
  // A transformers component folder: config.json and *.safetensors (or a sharded index).
  static ClipTextModel from_folder(const fs::path& folder);

  // Moves the weights to `device` (the CPU: as stored, mapped again from the checkpoint);
  // `compute` is the dtype the products read there (the CPU: float32 only; the GPU: bf16, or
  // float32 for checks); a non-empty `attention_backend` replaces the paged backend. Results
  // come back on the host.
  void set_device(Device device, DType compute = DType::BF16,
                  const std::string& attention_backend = "");
  Device device() const { return state_.device; }
  DType compute_dtype() const { return state_.compute; }

  struct Output {
    Tensor last_hidden_state;  // [B, S, hidden] float32, host
    Tensor pooled;             // [B, hidden] float32, host (pooler_output)
  };
  // input_ids [B, S] (int64 or int32), S ≤ max_position_embeddings; every position is a token
  // (no mask: causal attention only, as FluxPipeline calls it).
  Output forward(const Tensor& input_ids) const;
  // The same for rows of equal length (the tokenizer's encode_padded(prompt, 77).ids).
  Output forward(const std::vector<std::vector<int64_t>>& input_ids) const;

  // The row of each prompt pooler_output takes: argmax(ids) for legacy configs (eos_token_id 2),
  // else the first eos_token_id (0 when there is none), as transformers.
  std::vector<int64_t> pooled_positions(const Tensor& input_ids) const;

  // The paged backend attention runs through (a catalogue name, as the attention plan gives it
  // for the text_encoder component; default: the best one this machine runs) and its KV page
  // size.
  void set_attention_backend(const std::string& name, int64_t page_size = 1);
  const std::string& attention_backend() const { return attention_backend_; }

  const ClipTextConfig& config() const { return config_; }
  // Bytes of weights kept resident on the device (0 on the CPU: they stay mapped).
  size_t resident_weight_bytes() const { return state_.bytes; }
  // Every tensor the model holds, where it holds it, under its checkpoint name
  // (models/parameters.h): the model's tree for what works by name.
  // A LoRA layer's name as this checkpoint names it: with transformers' "text_model." prefix
  // where the checkpoint has it and without it where not, whichever the LoRA file used
  // (lora/lora_file.h).
  std::vector<lora::LoraTarget> lora_targets(const std::string& name) const {
    const std::string bare = name.starts_with("text_model.") ? name.substr(11) : name;
    return {{prefix_ + bare, {}}};
  }
  void list_parameters(const models::ParameterVisitor& visit) const;
  // What resident_weight_bytes() is after set_device(Device::CUDA, compute), from the config.
  static uint64_t gpu_weight_bytes(const ClipTextConfig& config, DType compute = DType::BF16);

 private:
  struct Layer {
    int64_t hidden_size = 0, intermediate_size = 0;
    Tensor norm1_weight, norm1_bias, norm2_weight, norm2_bias;  // float32
    Tensor q, k, v, out, fc1, fc2;  // CPU: stored dtype; GPU: compute dtype
    Tensor q_bias, k_bias, v_bias, out_bias, fc1_bias, fc2_bias;  // float32
    void parameters(const models::ParameterVisitor& visit);       // below "encoder.layers.N."
  };
  // What the model holds where it runs (models::move_model's state).
  struct Placed {
    Device device = Device::CPU;
    DType compute = DType::F32;
    int64_t vocab_size = 0, positions = 0, hidden_size = 0;
    Tensor token_embedding;     // [vocab, hidden], stored dtype, host
    Tensor position_embedding;  // [positions, hidden] float32, host
    std::vector<Layer> layers;
    Tensor final_norm_weight, final_norm_bias;
    size_t bytes = 0;
    void parameters(const models::ParameterVisitor& visit);  // below the checkpoint's prefix
  };
  // The config's shapes, no tensor loaded (models/parameters.h).
  static Placed shaped_state(const ClipTextConfig& config);
  // Every weight from the checkpoint (host, mapped; norms, biases and the position table float32)
  // after checking names, dtypes and shapes.
  Placed host_state() const;
  // Token + position embeddings of ids [B, S] as [B·S, hidden] float32 on the host.
  Tensor embed(const Tensor& ids) const;
  // The runner for a batch of `requests` prompts of `length` tokens (kept while it fits).
  attention::paged::PagedRunner& runner_for(int64_t requests, int64_t length) const;
  Tensor self_attention(int64_t index, const Layer& layer, const Tensor& x,
                        attention::paged::PagedRunner& runner) const;
  Tensor mlp(const Layer& layer, const Tensor& x) const;

  ClipTextConfig config_;
  WeightStore weights_;
  std::string prefix_;  // "text_model." or ""
  Placed state_;
  std::string attention_backend_;
  int64_t page_size_ = 1;
  // Kept across forwards of the same shape or smaller (its pools are sized to the batch).
  mutable std::unique_ptr<attention::paged::PagedRunner> runner_;
  mutable int64_t runner_requests_ = 0, runner_length_ = 0;
};

}  // namespace mmgen::text_encoders
