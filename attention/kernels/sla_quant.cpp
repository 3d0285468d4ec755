#include "attention/kernels/sla_quant.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/error.h"

namespace mmgen::attention::sla {

namespace {

// std::round (halves away from zero) in a form the compiler vectorises: x − trunc(x) is exact, so
// comparing it with 0.5 decides the same halves; signed zeros, NaNs and infinities come out as
// std::round's.
inline float round_half_away(float x) {
  const float t = std::trunc(x);
  return t + std::copysign(std::abs(x - t) >= 0.5f ? 1.0f : 0.0f, x);
}

}  // namespace

Tensor int8_round_trip(const Tensor& x, const BlockLayout& blocks, int64_t slice_rows,
                       float multiplier) {
  check(x.dim() == 4 && x.is_contiguous() && x.dtype() == DType::F32,
        "INT8 quantisation expects a contiguous float32 [B, S, H, D] tensor");
  check(slice_rows > 0, "INT8 quantisation: slice rows must be positive");
  const int64_t batch = x.size(0), seq = x.size(1), heads = x.size(2), dim = x.size(3);
  const int64_t row = heads * dim;
  // The row ranges that share a scale.
  std::vector<std::pair<int64_t, int64_t>> ranges;
  for (int64_t i = 0; i < blocks.size(); ++i) {
    const int64_t start = blocks.start[size_t(i)], end = start + blocks.length[size_t(i)];
    for (int64_t s = start; s < end; s += slice_rows)
      ranges.emplace_back(s, std::min(end, s + slice_rows));
  }
  Tensor out = Tensor::zeros(x.shape());
  const float* in = x.data<float>();
  float* result = out.data<float>();
  const int64_t count = int64_t(ranges.size());
#pragma omp parallel for collapse(3) schedule(static)
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t h = 0; h < heads; ++h)
      for (int64_t r = 0; r < count; ++r) {
        const auto [start, end] = ranges[size_t(r)];
        float max_abs = 0;
        for (int64_t s = start; s < end; ++s) {
          const float* v = in + (b * seq + s) * row + h * dim;
          for (int64_t d = 0; d < dim; ++d)
            max_abs = std::max(max_abs, std::abs(v[d] * multiplier));
        }
        if (max_abs == 0) continue;  // all zero: stays zero
        const float step = max_abs / 127.0f, inverse = 1.0f / step;
        for (int64_t s = start; s < end; ++s) {
          const float* v = in + (b * seq + s) * row + h * dim;
          float* o = result + (b * seq + s) * row + h * dim;
          for (int64_t d = 0; d < dim; ++d) {
            const float level =
                std::clamp(round_half_away(v[d] * multiplier * inverse), -127.0f, 127.0f);
            o[d] = level * step;
          }
        }
      }
  return out;
}

Tensor smooth_keys(const Tensor& k) {
  check(k.dim() == 4 && k.is_contiguous() && k.dtype() == DType::F32,
        "smooth_keys expects a contiguous float32 [B, S, H, D] tensor");
  const int64_t batch = k.size(0), seq = k.size(1), heads = k.size(2), dim = k.size(3);
  const int64_t row = heads * dim;
  Tensor out = Tensor::empty(k.shape());
  const float* in = k.data<float>();
  float* result = out.data<float>();
#pragma omp parallel for collapse(2) schedule(static)
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t h = 0; h < heads; ++h) {
      std::vector<double> mean(size_t(dim), 0.0);
      for (int64_t s = 0; s < seq; ++s)
        for (int64_t d = 0; d < dim; ++d) mean[size_t(d)] += in[(b * seq + s) * row + h * dim + d];
      for (auto& m : mean) m /= double(std::max<int64_t>(seq, 1));
      for (int64_t s = 0; s < seq; ++s)
        for (int64_t d = 0; d < dim; ++d) {
          const int64_t at = (b * seq + s) * row + h * dim + d;
          result[at] = float(in[at] - mean[size_t(d)]);
        }
    }
  return out;
}

}  // namespace mmgen::attention::sla
