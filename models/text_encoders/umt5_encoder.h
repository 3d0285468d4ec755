// The T5 / UMT5 encoder stack (transformers' T5EncoderModel / UMT5EncoderModel), float32 on the
// CPU: Wan's text encoder. Weights stay in their stored dtype (often bf16, memory-mapped) and are
// converted as each layer uses them. Attention runs through a paged backend (attention/paged/)
// as an encoder-only layer: prompts are packed without padding waste, the relative position bias
// is an additive per-head bias computed from a [heads, 2S − 1] table (no [heads, S, S] matrix),
// scores are not scaled, and no K/V is written to a pool.
#pragma once

#include <string>
#include <vector>

#include "attention/paged/forward_batch.h"
#include "attention/paged/paged_backend.h"
#include "attention/paged/paged_layer.h"
#include "core/safetensors.h"
#include "core/tensor.h"
#include "models/text_encoders/t5_config.h"

namespace mmgen::text_encoders {

class UMT5Encoder {
 public:
  // Checks that every weight the config implies is present with the right shape.
  UMT5Encoder(T5Config config, WeightStore weights);
  // A transformers component folder: config.json and *.safetensors (or a sharded index).
  static UMT5Encoder from_folder(const fs::path& folder);

  // input_ids [B, S] (int64, or int32), attention_mask [B, S] (any dtype; 0 marks padding) or
  // undefined for no padding. Returns last_hidden_state [B, S, d_model] float32. Rows at padded
  // positions are computed as transformers computes them (they attend to the real tokens only).
  // The mask must be right-padded (ones, then zeros) with at least one token per row.
  Tensor forward(const Tensor& input_ids, const Tensor& attention_mask = Tensor()) const;

  // Prompts of different lengths, packed with no padding: returns each prompt's
  // last_hidden_state [length, d_model] (equal to forward()'s rows at the real positions).
  std::vector<Tensor> forward_unpadded(const std::vector<std::vector<int64_t>>& prompts) const;

  // The paged backend attention runs through (a catalogue name, as the attention plan gives it
  // for the text_encoder component; default: the best one this machine runs). Encoder-only
  // layers keep no KV pool, so `page_size` changes nothing for T5; it is checked and kept for
  // symmetry with causal encoders.
  void set_attention_backend(const std::string& name, int64_t page_size = 1);
  const std::string& attention_backend() const { return attention_backend_; }

  const T5Config& config() const { return config_; }
  // The checked checkpoint (the GPU encoder uploads from it) and the token embedding as float32
  // [..., d_model] (the GPU encoder embeds on the host: the table stays mapped as stored).
  const WeightStore& weights() const { return weights_; }
  Tensor embed(const Tensor& input_ids) const;

 private:
  struct Layer {
    Tensor attention_norm, q, k, v, o;  // stored dtype
    Tensor position_table;  // [buckets, heads]; undefined where the layer reuses block 0's (T5)
    Tensor ffn_norm, wi_0, wi_1, wo;  // wi_0 is `wi` when the FFN is not gated
  };

  // The stack over packed tokens [tokens] described by `batch` (an encoder-only extend).
  Tensor encode_packed(const Tensor& ids, const attention::paged::ForwardBatch& batch) const;
  Tensor self_attention(const Layer& layer, const Tensor& x,
                        const attention::paged::ScoreBias& bias,
                        attention::paged::PagedAttentionBackend& backend,
                        const attention::paged::ForwardBatch& batch) const;
  Tensor feed_forward(const Layer& layer, const Tensor& x) const;
  void activate_(Tensor& x) const;

  T5Config config_;
  WeightStore weights_;
  Tensor embedding_;  // [vocab, d_model], stored dtype
  std::vector<Layer> layers_;
  Tensor final_norm_;
  std::string attention_backend_;
  int64_t page_size_ = 1;
};

}  // namespace mmgen::text_encoders
