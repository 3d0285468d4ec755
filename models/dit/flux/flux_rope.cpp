#include "models/dit/flux/flux_rope.h"

#include <cmath>
#include <utility>

namespace mmgen::dit {

FluxRopeTables FluxRopeTables::rows(int64_t start, int64_t end) const {
  return {cos.slice(0, start, end), sin.slice(0, start, end)};
}

FluxRopeTables flux_rope_tables(const FluxConfig& config, const FluxPositions& positions,
                                Device device) {
  const int64_t tokens = int64_t(positions.size()), half = config.attention_head_dim / 2;
  // theta^(-2j / dims) of every pair in float64, axes concatenated: once, not per token.
  std::vector<double> frequencies;
  std::vector<size_t> axis_of;
  frequencies.reserve(size_t(half));
  axis_of.reserve(size_t(half));
  for (size_t axis = 0; axis < 3; ++axis) {
    const int64_t dims = config.axes_dims_rope[axis];
    for (int64_t j = 0; j < dims / 2; ++j) {
      frequencies.push_back(1.0 / std::pow(config.rope_theta, double(2 * j) / double(dims)));
      axis_of.push_back(axis);
    }
  }
  std::vector<float> cos(size_t(tokens * half)), sin(cos.size());
  for (int64_t t = 0; t < tokens; ++t) {
    const std::array<float, 3>& position = positions[size_t(t)];  // ids.float(), then float64
    for (int64_t pair = 0; pair < half; ++pair) {
      const double angle = double(position[axis_of[size_t(pair)]]) * frequencies[size_t(pair)];
      cos[size_t(t * half + pair)] = float(std::cos(angle));
      sin[size_t(t * half + pair)] = float(std::sin(angle));
    }
  }
  const Shape shape = {tokens, half};
  return {Tensor::from_vector(shape, cos).to(device), Tensor::from_vector(shape, sin).to(device)};
}

FluxRopeTables FluxRopeCache::tables(const Key& key, const std::function<FluxRopeTables()>& build) {
  // A few layouts at most (a run's size; a prompt file may mix sizes): start over beyond that.
  constexpr size_t kMaxLayouts = 4;
  std::lock_guard<std::mutex> lock(mutex_);
  if (auto found = layouts_.find(key); found != layouts_.end()) return found->second;
  if (layouts_.size() >= kMaxLayouts) layouts_.clear();
  return layouts_.emplace(key, build()).first->second;
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
