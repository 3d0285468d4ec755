#include "models/dit/qwenimage/qwenimage_rope.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <vector>

#include "core/error.h"

namespace mmgen::dit {
namespace {

// The float32 inverse frequencies of every pair, axes concatenated: [head_dim / 2].
std::vector<float> inverse_frequencies(const QwenImageConfig& config) {
  std::vector<float> out;
  for (const int64_t dims : config.axes_dims_rope)
    for (int64_t j = 0; j < dims / 2; ++j) {
      const float exponent = float(2 * j) / float(dims);  // arange(0, d, 2).float().div(d)
      const float power = float(std::pow(config.rope_theta, double(exponent)));
      out.push_back(1.0f / power);
    }
  return out;
}

}  // namespace

FluxRopeTables qwenimage_rope_tables(const QwenImageConfig& config, const QwenImageShape& shape,
                                     int64_t text_tokens, Device device) {
  const int64_t limit = config.rope_positions;
  const int64_t row_start = -(shape.rows - shape.rows / 2);
  const int64_t column_start = -(shape.columns - shape.columns / 2);
  const int64_t text_start = std::max(shape.rows / 2, shape.columns / 2);
  check(shape.frames > 0 && shape.rows > 0 && shape.columns > 0 && text_tokens >= 0,
        "Qwen-Image RoPE: image grid {}x{}x{} and {} text tokens", shape.frames, shape.rows,
        shape.columns, text_tokens);
  check(shape.frames <= limit && -row_start <= limit && -column_start <= limit &&
            text_start + text_tokens <= limit,
        "Qwen-Image RoPE: a {}x{}x{} token grid with {} text tokens needs positions beyond "
        "diffusers' {} (a smaller image or a shorter prompt)",
        shape.frames, shape.rows, shape.columns, text_tokens, limit);

  const std::vector<float> inverse = inverse_frequencies(config);
  const int64_t half = config.attention_head_dim / 2;
  const int64_t tokens = text_tokens + shape.tokens();
  std::vector<float> cos(size_t(tokens * half)), sin(cos.size());
  const auto fill = [&](int64_t token, const std::array<int64_t, 3>& position) {
    int64_t pair = 0;
    for (size_t axis = 0; axis < 3; ++axis)
      for (int64_t j = 0; j < config.axes_dims_rope[axis] / 2; ++j, ++pair) {
        const float angle = float(position[axis]) * inverse[size_t(pair)];  // float32, as torch
        cos[size_t(token * half + pair)] = float(std::cos(double(angle)));
        sin[size_t(token * half + pair)] = float(std::sin(double(angle)));
      }
  };
  for (int64_t t = 0; t < text_tokens; ++t)
    fill(t, {text_start + t, text_start + t, text_start + t});
  int64_t token = text_tokens;
  for (int64_t f = 0; f < shape.frames; ++f)
    for (int64_t i = 0; i < shape.rows; ++i)
      for (int64_t j = 0; j < shape.columns; ++j)
        fill(token++, {f, row_start + i, column_start + j});
  const Shape table = {tokens, half};
  return {Tensor::from_vector(table, cos).to(device), Tensor::from_vector(table, sin).to(device)};
}

}  // namespace mmgen::dit
