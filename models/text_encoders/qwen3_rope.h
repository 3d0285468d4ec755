// Rotary position embedding as transformers applies it to Qwen3 (and Llama-style models): the
// "rotate half" convention, where dimension i pairs with i + head_dim / 2 (not interleaved pairs),
// with inverse frequencies 1 / theta^(2i / head_dim) computed in float32 as transformers does.
#pragma once

#include <cstdint>
#include <vector>

#include "core/tensor.h"

namespace mmgen::text_encoders {

class RotaryEmbedding {
 public:
  // linear_factor divides the positions (transformers' "linear" rope type); 1 for "default".
  RotaryEmbedding(int64_t head_dim, double theta, double linear_factor = 1.0);

  // Rotates x [tokens, heads, head_dim] (float32, contiguous) in place; positions[t] is token t's.
  void apply_(Tensor& x, const std::vector<int64_t>& positions) const;

  const std::vector<float>& inverse_frequencies() const { return inverse_frequencies_; }

 private:
  int64_t head_dim_;
  std::vector<float> inverse_frequencies_;  // head_dim / 2
};

}  // namespace mmgen::text_encoders
