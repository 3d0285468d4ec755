#include "models/text_encoders/t5_relative_position.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <vector>

#include "core/error.h"

namespace mmgen::text_encoders {

int64_t t5_relative_position_bucket(int64_t relative_position, int64_t num_buckets,
                                    int64_t max_distance) {
  const int64_t half = num_buckets / 2;  // one half per direction
  const int64_t base = relative_position > 0 ? half : 0;
  const int64_t distance = std::abs(relative_position);
  const int64_t max_exact = half / 2;
  if (distance < max_exact) return base + distance;
  // float32 throughout with a float32 divisor, as torch evaluates log(d / e) / log(m / e) · n on a
  // float tensor with a Python-float scalar; the truncation then matches at the bin edges.
  const float log_ratio = std::log(float(distance) / float(max_exact)) /
                          float(std::log(double(max_distance) / double(max_exact)));
  const int64_t large = max_exact + int64_t(log_ratio * float(half - max_exact));
  return base + std::min(large, half - 1);
}

std::vector<int64_t> t5_offset_buckets(int64_t max_len, int64_t num_buckets, int64_t max_distance) {
  std::vector<int64_t> buckets(size_t(std::max<int64_t>(2 * max_len - 1, 0)));
  for (int64_t offset = -(max_len - 1); offset <= max_len - 1; ++offset)
    buckets[size_t(offset + max_len - 1)] =
        t5_relative_position_bucket(offset, num_buckets, max_distance);
  return buckets;
}

Tensor t5_relative_position_bias(const Tensor& table, int64_t length, int64_t max_distance) {
  check(table.dim() == 2, "relative_attention_bias.weight should be [buckets, heads], got {}",
        shape_string(table.shape()));
  const Tensor weights = table.to(DType::F32);
  const int64_t num_buckets = weights.size(0), heads = weights.size(1);
  // The bias depends only on j − i: one bucket per offset in [−(length−1), length−1].
  const std::vector<int64_t> bucket_of_offset =
      t5_offset_buckets(length, num_buckets, max_distance);

  Tensor bias = Tensor::empty({heads, length, length});
  const float* w = weights.data<float>();
  float* out = bias.data<float>();
// Below 64k entries one thread is faster than waking a team.
#pragma omp parallel for collapse(2) schedule(static) if (heads * length * length >= (1 << 16))
  for (int64_t h = 0; h < heads; ++h)
    for (int64_t i = 0; i < length; ++i) {
      float* row = out + (h * length + i) * length;
      for (int64_t j = 0; j < length; ++j)
        row[j] = w[bucket_of_offset[size_t(j - i + length - 1)] * heads + h];
    }
  return bias;
}

}  // namespace mmgen::text_encoders
