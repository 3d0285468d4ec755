// The T5 / UMT5 encoder stack (transformers' T5EncoderModel / UMT5EncoderModel), float32 on the
// CPU: Wan's text encoder. Weights stay in their stored dtype (often bf16, memory-mapped) and are
// converted as each layer uses them.
#pragma once

#include <vector>

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
  Tensor forward(const Tensor& input_ids, const Tensor& attention_mask = Tensor()) const;

  const T5Config& config() const { return config_; }

 private:
  struct Layer {
    Tensor attention_norm, q, k, v, o;  // stored dtype
    Tensor position_table;  // [buckets, heads]; undefined where the layer reuses block 0's (T5)
    Tensor ffn_norm, wi_0, wi_1, wo;  // wi_0 is `wi` when the FFN is not gated
  };

  Tensor embed(const Tensor& input_ids) const;
  Tensor self_attention(const Layer& layer, const Tensor& x, const Tensor& position_bias,
                        const Tensor& key_mask) const;
  Tensor feed_forward(const Layer& layer, const Tensor& x) const;
  void activate_(Tensor& x) const;

  T5Config config_;
  WeightStore weights_;
  Tensor embedding_;  // [vocab, d_model], stored dtype
  std::vector<Layer> layers_;
  Tensor final_norm_;
};

}  // namespace mmgen::text_encoders
