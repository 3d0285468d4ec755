// Rotary position embedding as transformers applies it to Qwen3 (and Llama-style models): the
// "rotate half" convention, where dimension i pairs with i + head_dim / 2 (not interleaved pairs),
// with inverse frequencies 1 / theta^(2i / head_dim) computed in float32 as transformers does.
// The rotation itself is the device-neutral op ops::rope_half_; this class makes its cos / sin
// tables once per forward (on the host, then moved where the activations are), so every layer
// reuses them.
#pragma once

#include <cstdint>
#include <vector>

#include "core/tensor.h"

namespace mmgen::text_encoders {

// cos and sin of position · inverse frequency, float32 [tokens, head_dim / 2].
struct RopeTables {
  Tensor cos, sin;
};

class RotaryEmbedding {
 public:
  // linear_factor divides the positions (transformers' "linear" rope type); 1 for "default".
  RotaryEmbedding(int64_t head_dim, double theta, double linear_factor = 1.0);

  // The tables for these positions (positions[t] is token t's), on `device`.
  RopeTables tables(const std::vector<int64_t>& positions, Device device = Device::CPU) const;

  // Rotates x [tokens, heads, head_dim] (float32, contiguous) in place; positions[t] is token t's.
  void apply_(Tensor& x, const std::vector<int64_t>& positions) const;

  const std::vector<float>& inverse_frequencies() const { return inverse_frequencies_; }

 private:
  int64_t head_dim_;
  std::vector<float> inverse_frequencies_;  // head_dim / 2
};

}  // namespace mmgen::text_encoders
