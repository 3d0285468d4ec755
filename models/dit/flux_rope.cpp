#include "models/dit/flux_rope.h"

#include <cmath>

namespace mmgen::dit {

FluxRopeTables FluxRopeTables::rows(int64_t start, int64_t end) const {
  return {cos.slice(0, start, end), sin.slice(0, start, end)};
}

FluxRopeTables flux_rope_tables(const FluxConfig& config, const FluxPositions& positions,
                                Device device) {
  const int64_t tokens = int64_t(positions.size()), half = config.attention_head_dim / 2;
  std::vector<float> cos(size_t(tokens * half)), sin(cos.size());
  for (int64_t t = 0; t < tokens; ++t) {
    int64_t pair = 0;
    for (size_t axis = 0; axis < 3; ++axis) {
      const int64_t dims = config.axes_dims_rope[axis];
      const double position = positions[size_t(t)][axis];  // ids.float(), then float64
      for (int64_t j = 0; j < dims / 2; ++j, ++pair) {
        const double frequency = 1.0 / std::pow(config.rope_theta, double(2 * j) / double(dims));
        const double angle = position * frequency;
        cos[size_t(t * half + pair)] = float(std::cos(angle));
        sin[size_t(t * half + pair)] = float(std::sin(angle));
      }
    }
  }
  const Shape shape = {tokens, half};
  return {Tensor::from_vector(shape, cos).to(device), Tensor::from_vector(shape, sin).to(device)};
}

FluxPositions flux_image_positions(int64_t rows, int64_t columns) {
  FluxPositions out;
  out.reserve(size_t(rows * columns));
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < columns; ++j) out.push_back({0.0f, float(i), float(j)});
  return out;
}

FluxPositions flux_text_positions(int64_t tokens) {
  return FluxPositions(size_t(tokens), {0.0f, 0.0f, 0.0f});
}

}  // namespace mmgen::dit
