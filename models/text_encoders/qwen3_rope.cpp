#include "models/text_encoders/qwen3_rope.h"

#include <cmath>

#include "core/error.h"

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

void RotaryEmbedding::apply_(Tensor& x, const std::vector<int64_t>& positions) const {
  check(x.dim() == 3 && x.size(2) == head_dim_ && x.dtype() == DType::F32 && x.is_contiguous(),
        "RoPE: expected [tokens, heads, {}] float32, got {}", head_dim_, shape_string(x.shape()));
  check(int64_t(positions.size()) == x.size(0), "RoPE: {} positions for {} tokens",
        positions.size(), x.size(0));
  const int64_t tokens = x.size(0), heads = x.size(1), half = head_dim_ / 2;
  float* data = x.data<float>();
#pragma omp parallel for schedule(static) if (tokens * heads * head_dim_ > (1 << 16))
  for (int64_t t = 0; t < tokens; ++t) {
    // cos / sin of (position · inverse frequency), each product rounded to float as in torch.
    std::vector<float> cosines(static_cast<size_t>(half)), sines(static_cast<size_t>(half));
    for (int64_t i = 0; i < half; ++i) {
      const float angle = float(positions[size_t(t)]) * inverse_frequencies_[size_t(i)];
      cosines[size_t(i)] = std::cos(angle);
      sines[size_t(i)] = std::sin(angle);
    }
    for (int64_t h = 0; h < heads; ++h) {
      float* row = data + (t * heads + h) * head_dim_;
      for (int64_t i = 0; i < half; ++i) {
        const float first = row[i], second = row[i + half];
        // x · cos + rotate_half(x) · sin, with rotate_half(x) = (-second, first).
        row[i] = first * cosines[size_t(i)] + (-second) * sines[size_t(i)];
        row[i + half] = second * cosines[size_t(i)] + first * sines[size_t(i)];
      }
    }
  }
}

}  // namespace mmgen::text_encoders
