#include "attention/kernels/sage_quant.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace mmgen::attention::sage {

namespace {

// Rounds |x| onto a minifloat grid with `mantissa_bits` explicit mantissa bits, normals from
// 2^min_exponent up, subnormals below with the step of the smallest binade, saturating at
// `max_value`. std::nearbyint in the default rounding mode breaks ties to even, and since the
// step is a power of two a / step is exact, so the result is the correctly rounded value.
float round_minifloat(float x, int mantissa_bits, int min_exponent, float max_value) {
  if (std::isnan(x)) return x;
  const float a = std::fabs(x);
  if (a == 0.0f) return x;
  float rounded;
  if (a >= max_value) {
    rounded = max_value;
  } else {
    int exponent = std::ilogb(a);
    exponent = std::max(exponent, min_exponent);
    const float step = std::ldexp(1.0f, exponent - mantissa_bits);
    rounded = std::min(std::nearbyint(a / step) * step, max_value);
  }
  return std::copysign(rounded, x);
}

}  // namespace

float round_e2m1(float x) {
  return round_minifloat(x, 1, 0, kE2m1Max);
}

float round_e4m3(float x) {
  return round_minifloat(x, 3, -6, kE4m3Max);
}

int64_t scale_group(int64_t row, Granularity granularity, bool is_query) {
  if (is_query) {
    switch (granularity) {
      case Granularity::PerBlock:
        return row / kQueryBlock;
      case Granularity::PerWarp:
        return row / kWarpRows;
      case Granularity::PerThread:
        return (row / kWarpRows) * 8 + row % 8;
    }
  }
  if (granularity == Granularity::PerThread) return (row / kKeyBlock) * 4 + (row % 8) / 2;
  return row / kKeyBlock;  // per_block and per_warp share the key blocking
}

void quantize_int8(const float* x, int64_t rows, int64_t dim, int64_t stride,
                   Granularity granularity, bool is_query, float* values, float* row_scales) {
  if (rows == 0) return;
  int64_t groups = 0;
  for (int64_t r = 0; r < rows; ++r)
    groups = std::max(groups, scale_group(r, granularity, is_query) + 1);
  std::vector<float> group_max(size_t(groups), 0.0f);
  for (int64_t r = 0; r < rows; ++r) {
    float m = 0;
    for (int64_t d = 0; d < dim; ++d) m = std::max(m, std::fabs(x[r * stride + d]));
    float& g = group_max[size_t(scale_group(r, granularity, is_query))];
    g = std::max(g, m);
  }
  for (int64_t r = 0; r < rows; ++r) {
    const float m = group_max[size_t(scale_group(r, granularity, is_query))];
    const float scale = m > 0 ? m / 127.0f : 1.0f;
    row_scales[r] = scale;
    for (int64_t d = 0; d < dim; ++d) {
      // std::round rounds half away from zero, as the GPU quantisation kernels do.
      const float q = std::round(x[r * stride + d] / scale);
      values[r * dim + d] = std::clamp(q, -127.0f, 127.0f);
    }
  }
}

float quantize_fp4_group(const float* x, int64_t count, int64_t stride, float* out,
                         int64_t out_stride) {
  float m = 0;
  for (int64_t i = 0; i < count; ++i) m = std::max(m, std::fabs(x[i * stride]));
  if (m == 0) {
    for (int64_t i = 0; i < count; ++i) out[i * out_stride] = 0;
    return 0;
  }
  float scale = round_e4m3(m / kE2m1Max);
  if (scale == 0) scale = std::ldexp(1.0f, -9);  // the smallest e4m3 subnormal
  for (int64_t i = 0; i < count; ++i)
    out[i * out_stride] = round_e2m1(x[i * stride] / scale) * scale;
  return scale;
}

}  // namespace mmgen::attention::sage
