#include "models/dit/wan_kernels.h"

#include <cmath>

#include "core/dtype.h"
#include "core/error.h"

namespace mmgen::dit {
namespace {

// Below this many values a loop runs on one thread: waking the team costs more than the work
// (the test models, the per-timestep embeddings).
constexpr int64_t kParallelThreshold = 1 << 15;

}  // namespace

Tensor weight_to_f32(const Tensor& weight) {
  if (weight.dtype() == DType::F32) return weight.contiguous();
  if (weight.dtype() != DType::BF16 || !weight.is_contiguous()) return weight.to(DType::F32);
  Tensor result = Tensor::empty(weight.shape(), DType::F32);
  const uint16_t* from = weight.data<uint16_t>();
  float* to = result.data<float>();
  const int64_t count = weight.numel();
#pragma omp parallel for schedule(static) if (count > kParallelThreshold)
  for (int64_t i = 0; i < count; ++i) to[i] = bf16_to_f32(from[i]);
  return result;
}

void modulated_layer_norm(const float* x, float* out, int64_t rows, int64_t dim, const float* shift,
                          const float* scale_plus_one, float eps) {
#pragma omp parallel for schedule(static) if (rows * dim > kParallelThreshold)
  for (int64_t r = 0; r < rows; ++r) {
    const float* row = x + r * dim;
    // Mean and variance in double: the rows are long (1536-5120) and this costs nothing next to
    // the GEMMs.
    double sum = 0;
    for (int64_t i = 0; i < dim; ++i) sum += row[i];
    const double mean = sum / double(dim);
    double squares = 0;
    for (int64_t i = 0; i < dim; ++i) squares += (row[i] - mean) * (row[i] - mean);
    const float inv = float(1.0 / std::sqrt(squares / double(dim) + double(eps)));
    const float mean_f = float(mean);
    float* dst = out + r * dim;
    for (int64_t i = 0; i < dim; ++i)
      dst[i] = ((row[i] - mean_f) * inv) * scale_plus_one[i] + shift[i];
  }
}

void add_gated_(float* x, const float* y, int64_t rows, int64_t dim, const float* gate) {
#pragma omp parallel for schedule(static) if (rows * dim > kParallelThreshold)
  for (int64_t r = 0; r < rows; ++r) {
    float* dst = x + r * dim;
    const float* src = y + r * dim;
    if (gate) {
      for (int64_t i = 0; i < dim; ++i) dst[i] += src[i] * gate[i];
    } else {
      for (int64_t i = 0; i < dim; ++i) dst[i] += src[i];
    }
  }
}

void rms_norm_rows_(float* x, int64_t rows, int64_t dim, const float* weight, float eps) {
#pragma omp parallel for schedule(static) if (rows * dim > kParallelThreshold)
  for (int64_t r = 0; r < rows; ++r) {
    float* row = x + r * dim;
    double squares = 0;
    for (int64_t i = 0; i < dim; ++i) squares += double(row[i]) * row[i];
    const float inv = float(1.0 / std::sqrt(squares / double(dim) + double(eps)));
    for (int64_t i = 0; i < dim; ++i) row[i] = (row[i] * inv) * weight[i];
  }
}

}  // namespace mmgen::dit
