#include "models/dit/zimage/zimage_rope.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"

namespace mmgen::dit {

ZImageRope::ZImageRope(const ZImageConfig& config)
    : axes_dims_(config.axes_dims),
      axes_lens_(config.axes_lens),
      half_head_(config.head_dim() / 2) {
  for (size_t axis = 0; axis < 3; ++axis) {
    const int64_t pairs = axes_dims_[axis] / 2, positions = axes_lens_[axis];
    std::vector<double> frequency(static_cast<size_t>(pairs));
    for (int64_t j = 0; j < pairs; ++j)
      frequency[size_t(j)] =
          1.0 / std::pow(config.rope_theta, double(2 * j) / double(axes_dims_[axis]));
    std::vector<float>& angles = angles_[axis];
    angles.resize(size_t(positions * pairs));
    for (int64_t p = 0; p < positions; ++p)
      for (int64_t j = 0; j < pairs; ++j)
        angles[size_t(p * pairs + j)] = float(double(p) * frequency[size_t(j)]);
  }
}

ZImageRopeTables ZImageRope::tables(const ZImagePositions& positions, Device device) const {
  const int64_t tokens = int64_t(positions.size());
  std::vector<float> cos(size_t(tokens * half_head_)), sin(cos.size());
  for (int64_t t = 0; t < tokens; ++t) {
    float* c = cos.data() + t * half_head_;
    float* s = sin.data() + t * half_head_;
    int64_t pair = 0;
    for (size_t axis = 0; axis < 3; ++axis) {
      const int64_t position = positions[size_t(t)][axis], pairs = axes_dims_[axis] / 2;
      check(position >= 0 && position < axes_lens_[axis],
            "Z-Image RoPE: position {} on axis {} is outside its table of {}", position, axis,
            axes_lens_[axis]);
      for (int64_t j = 0; j < pairs; ++j, ++pair) {
        // torch.polar in float32 of the float32 angle.
        const double angle = angles_[axis][size_t(position * pairs + j)];
        c[pair] = float(std::cos(angle));
        s[pair] = float(std::sin(angle));
      }
    }
  }
  const Shape shape = {tokens, half_head_};
  return {Tensor::from_vector(shape, cos).to(device), Tensor::from_vector(shape, sin).to(device)};
}

}  // namespace mmgen::dit
