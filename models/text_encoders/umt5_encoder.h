// The T5 / UMT5 encoder stack (transformers' T5EncoderModel / UMT5EncoderModel): Wan's text
// encoder, written once over the device-neutral ops (core/ops.h) and run where set_device() puts
// it. On the CPU it computes in float32 and weights stay in their stored dtype (often bf16,
// memory-mapped; a GGUF file's quantized blocks, in transformers' or llama.cpp's T5 names),
// converted as each layer uses them. On the GPU the weights are resident in the
// compute dtype (bf16 products with float32 accumulation, or float32 for the exact mode), the
// residual stream stays float32, and the token embedding stays on the host (the table is large
// and only the prompt's rows are needed). Attention runs through a paged backend (attention/
// paged/) of the same device as an encoder-only layer: prompts are packed without padding waste,
// the relative position bias is an additive per-head bias computed from a [heads, 2S − 1] table
// (no [heads, S, S] matrix), scores are not scaled, and no K/V is written to a pool.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "attention/paged/forward_batch.h"
#include "attention/paged/paged_backend.h"
#include "attention/paged/paged_layer.h"
#include "core/safetensors.h"
#include "core/tensor.h"
#include "models/parameters.h"
#include "models/text_encoders/t5_config.h"

namespace mmgen::text_encoders {

class UMT5Encoder {
 public:
  // Checks that every weight the config implies is present with the right shape.
  UMT5Encoder(T5Config config, WeightStore weights);
  // A transformers component folder: config.json and *.safetensors (or a sharded index).
  static UMT5Encoder from_folder(const fs::path& folder);
  // Random bf16 weights of `config`'s size made where `device` is (benchmarks): no token
  // embedding, so only encode_embeddings() runs.
  static UMT5Encoder random(const T5Config& config, uint64_t seed, Device device);

  // Moves the weights to `device` (the CPU: as stored, mapped again from the checkpoint, the
  // device copies freed); `compute` is the dtype the products
  // read there (the CPU: float32 only; the GPU: bf16, or float32 for checks); a non-empty
  // `attention_backend` replaces the paged backend (a name that device runs). Results still
  // come back on the host.
  void set_device(Device device, DType compute = DType::BF16,
                  const std::string& attention_backend = "");
  Device device() const { return state_.device; }
  DType compute_dtype() const { return state_.compute; }

  // input_ids [B, S] (int64, or int32), attention_mask [B, S] (any dtype; 0 marks padding) or
  // undefined for no padding. Returns last_hidden_state [B, S, d_model] float32. Rows at padded
  // positions are computed as transformers computes them (they attend to the real tokens only).
  // The mask must be right-padded (ones, then zeros) with at least one token per row.
  Tensor forward(const Tensor& input_ids, const Tensor& attention_mask = Tensor()) const;

  // Prompts of different lengths, packed with no padding: returns each prompt's
  // last_hidden_state [length, d_model] (equal to forward()'s rows at the real positions).
  std::vector<Tensor> forward_unpadded(const std::vector<std::vector<int64_t>>& prompts) const;

  // The stack on embedded tokens [tokens, d_model] (float32, any device) packed as the
  // encoder-only `batch` describes; returns [tokens, d_model] float32 on the encoder's device.
  Tensor encode_embeddings(const Tensor& embeddings,
                           const attention::paged::ForwardBatch& batch) const;
  // Bytes of weights the encoder keeps resident on its device (0 on the CPU: they stay mapped).
  size_t resident_weight_bytes() const { return state_.bytes; }
  // Every tensor the model holds, where it holds it, under its checkpoint name
  // (models/parameters.h): the model's tree for what works by name.
  void list_parameters(const models::ParameterVisitor& visit) const;
  // What resident_weight_bytes() is after set_device(Device::CUDA, compute), from the config
  // alone (the token embedding stays on the host).
  static uint64_t gpu_weight_bytes(const T5Config& config, DType compute = DType::BF16);

  // The paged backend attention runs through (a catalogue name, as the attention plan gives it
  // for the text_encoder component; default: the best one this machine runs). Encoder-only
  // layers keep no KV pool, so `page_size` changes nothing for T5; it is checked and kept for
  // symmetry with causal encoders.
  void set_attention_backend(const std::string& name, int64_t page_size = 1);
  const std::string& attention_backend() const { return attention_backend_; }

  const T5Config& config() const { return config_; }
  // The token embedding as float32 [..., d_model] on the host (the table stays mapped as stored).
  Tensor embed(const Tensor& input_ids) const;

 private:
  struct Layer {
    int64_t d_model = 0, inner = 0, d_ff = 0;
    bool gated = true;                  // wi_0 and wi_1, or one `wi`
    Shape position_table_shape;         // [buckets, heads], or empty where block 0's serves (T5)
    Tensor attention_norm, q, k, v, o;  // CPU: stored dtype; GPU: compute dtype (norms float32)
    Tensor position_table;  // [buckets, heads] float32 on the host; undefined where the layer
                            // reuses block 0's (T5)
    Tensor ffn_norm, wi_0, wi_1, wo;  // wi_0 is `wi` when the FFN is not gated
    void parameters(const models::ParameterVisitor& visit);  // below "encoder.block.N.layer."
  };
  // What the encoder holds where it runs (models::move_model's state).
  struct Placed {
    Device device = Device::CPU;
    DType compute = DType::F32;
    int64_t vocab_size = 0, d_model = 0;
    std::string embedding_name;  // "shared.weight" or "encoder.embed_tokens.weight"
    Tensor embedding;            // [vocab, d_model], stored dtype, on the host
    std::vector<Layer> layers;
    Tensor final_norm;
    size_t bytes = 0;
    void parameters(const models::ParameterVisitor& visit);  // checkpoint names
  };
  // The config's shapes, no tensor loaded (models/parameters.h).
  static Placed shaped_state(const T5Config& config, std::string embedding_name);
  // The embedding and every layer's weights from the checkpoint, as stored (host, mapped),
  // after checking every name, dtype and shape against the config.
  Placed host_state() const;
  UMT5Encoder() = default;
  void check_device_support(const Placed& state) const;

  // The stack over packed tokens [tokens] described by `batch` (an encoder-only extend), back on
  // the host.
  Tensor encode_packed(const Tensor& ids, const attention::paged::ForwardBatch& batch) const;
  Tensor self_attention(const Layer& layer, const Tensor& x,
                        const attention::paged::ScoreBias& bias,
                        attention::paged::PagedAttentionBackend& backend,
                        const attention::paged::ForwardBatch& batch) const;
  Tensor feed_forward(const Layer& layer, const Tensor& x) const;

  T5Config config_;
  WeightStore weights_;
  bool from_checkpoint_ = true;  // false for random(): its weights exist only where they are
  Placed state_;
  std::string attention_backend_;
  int64_t page_size_ = 1;
  // The attention backend, kept across forwards (init_forward_metadata resets it per batch;
  // a copy shares it until one of them moves to another device or backend).
  mutable std::shared_ptr<attention::paged::PagedAttentionBackend> backend_;
  mutable Device backend_device_ = Device::CPU;
};

}  // namespace mmgen::text_encoders
