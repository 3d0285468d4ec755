#include "models/text_encoders/qwen3_rope.h"

#include <cmath>

#include "core/error.h"
#include "core/ops.h"

namespace mmgen::text_encoders {

RotaryEmbedding::RotaryEmbedding(int64_t head_dim, double theta, double linear_factor)
    : head_dim_(head_dim) {
  check(head_dim > 0 && head_dim % 2 == 0, "RoPE: head_dim {} must be positive and even", head_dim);
  // transformers: 1.0 / (base ** (arange(0, dim, 2).float() / dim)), all float32, then / factor.
  const float base = float(theta);
  for (int64_t i = 0; i < head_dim / 2; ++i) {
    const float exponent = float(2 * i) / float(head_dim);
    float frequency = 1.0f / std::pow(base, exponent);
    if (linear_factor != 1.0) frequency /= float(linear_factor);
    inverse_frequencies_.push_back(frequency);
  }
}

RopeTables RotaryEmbedding::tables(const std::vector<int64_t>& positions, Device device) const {
  const int64_t tokens = int64_t(positions.size()), half = head_dim_ / 2;
  RopeTables result{Tensor::empty({tokens, half}), Tensor::empty({tokens, half})};
  float* cosines = result.cos.data<float>();
  float* sines = result.sin.data<float>();
#pragma omp parallel for schedule(static) if (tokens * half > (1 << 15))
  for (int64_t t = 0; t < tokens; ++t) {
    for (int64_t i = 0; i < half; ++i) {
      // cos / sin of (position · inverse frequency), each product rounded to float as in torch.
      const float angle = float(positions[size_t(t)]) * inverse_frequencies_[size_t(i)];
      cosines[t * half + i] = std::cos(angle);
      sines[t * half + i] = std::sin(angle);
    }
  }
  if (device != Device::CPU) result = {result.cos.to(device), result.sin.to(device)};
  return result;
}

void RotaryEmbedding::apply_(Tensor& x, const std::vector<int64_t>& positions) const {
  check(x.dim() == 3 && x.size(2) == head_dim_ && x.dtype() == DType::F32 && x.is_contiguous(),
        "RoPE: expected [tokens, heads, {}] float32, got {}", head_dim_, shape_string(x.shape()));
  check(int64_t(positions.size()) == x.size(0), "RoPE: {} positions for {} tokens",
        positions.size(), x.size(0));
  const RopeTables t = tables(positions, x.device());
  ops::rope_half_(x, t.cos, t.sin);
}

}  // namespace mmgen::text_encoders
