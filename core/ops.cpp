#include "core/ops.h"

#include <Eigen/Core>
#include <cmath>

#include "core/error.h"

namespace mmgen::ops {
namespace {

using RowMatrix = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using MapConst = Eigen::Map<const RowMatrix>;
using Map = Eigen::Map<RowMatrix>;

// Below this many elements a loop runs on one thread: starting an OpenMP team costs more.
constexpr int64_t kParallelThreshold = 1 << 15;

void require_f32_contiguous(const Tensor& x, const char* what) {
  check(x.dtype() == DType::F32 && x.is_contiguous(), "{}: expects a contiguous float32 tensor", what);
}

}  // namespace

Tensor as_f32(const Tensor& x) { return x.to(DType::F32); }

void gemm(const float* a, const float* b, float* c, int64_t m, int64_t k, int64_t n) {
  Map(c, m, n).noalias() = MapConst(a, m, k) * MapConst(b, k, n);
}

void gemm_bt(const float* a, const float* b, float* c, int64_t m, int64_t k, int64_t n) {
  Map(c, m, n).noalias() = MapConst(a, m, k) * MapConst(b, n, k).transpose();
}

Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias) {
  require_f32_contiguous(x, "linear");
  check(weight.dim() == 2, "linear: weight must be 2-d, got {}", shape_string(weight.shape()));
  const int64_t in = weight.size(1), out = weight.size(0);
  check(x.size(-1) == in, "linear: input {} does not match weight {}", shape_string(x.shape()),
        shape_string(weight.shape()));
  const int64_t rows = x.numel() / in;
  Shape out_shape = x.shape();
  out_shape.back() = out;
  Tensor y = Tensor::empty(out_shape);
  Tensor w = as_f32(weight);
  gemm_bt(x.data<float>(), w.data<float>(), y.data<float>(), rows, in, out);
  if (bias.defined()) {
    check(bias.numel() == out, "linear: bias of {} for {} outputs", bias.numel(), out);
    Tensor b = as_f32(bias);
    Map(y.data<float>(), rows, out).rowwise() += Eigen::Map<const Eigen::RowVectorXf>(b.data<float>(), out);
  }
  return y;
}

Tensor layer_norm(const Tensor& x, float eps, const Tensor& weight, const Tensor& bias) {
  require_f32_contiguous(x, "layer_norm");
  const int64_t dim = x.size(-1), rows = x.numel() / dim;
  Tensor y = Tensor::empty(x.shape());
  Tensor w = weight.defined() ? as_f32(weight) : Tensor(), b = bias.defined() ? as_f32(bias) : Tensor();
  const float* in = x.data<float>();
  float* out = y.data<float>();
#pragma omp parallel for schedule(static) if (rows * dim > kParallelThreshold)
  for (int64_t r = 0; r < rows; ++r) {
    const float* row = in + r * dim;
    double mean = 0;
    for (int64_t i = 0; i < dim; ++i) mean += row[i];
    mean /= double(dim);
    double variance = 0;
    for (int64_t i = 0; i < dim; ++i) variance += (row[i] - mean) * (row[i] - mean);
    variance /= double(dim);
    const float inv = float(1.0 / std::sqrt(variance + double(eps)));
    float* dst = out + r * dim;
    for (int64_t i = 0; i < dim; ++i) {
      float value = (row[i] - float(mean)) * inv;
      if (w.defined()) value *= w.data<float>()[i];
      if (b.defined()) value += b.data<float>()[i];
      dst[i] = value;
    }
  }
  return y;
}

Tensor rms_norm(const Tensor& x, const Tensor& weight, float eps) {
  require_f32_contiguous(x, "rms_norm");
  const int64_t dim = x.size(-1), rows = x.numel() / dim;
  Tensor y = Tensor::empty(x.shape());
  Tensor w = weight.defined() ? as_f32(weight) : Tensor();
  const float* in = x.data<float>();
  float* out = y.data<float>();
#pragma omp parallel for schedule(static) if (rows * dim > kParallelThreshold)
  for (int64_t r = 0; r < rows; ++r) {
    const float* row = in + r * dim;
    double sum = 0;
    for (int64_t i = 0; i < dim; ++i) sum += double(row[i]) * row[i];
    const float inv = float(1.0 / std::sqrt(sum / double(dim) + double(eps)));
    float* dst = out + r * dim;
    for (int64_t i = 0; i < dim; ++i) dst[i] = row[i] * inv * (w.defined() ? w.data<float>()[i] : 1.0f);
  }
  return y;
}

void silu_(Tensor& x) {
  require_f32_contiguous(x, "silu");
  float* p = x.data<float>();
  const int64_t n = x.numel();
#pragma omp parallel for schedule(static) if (n > kParallelThreshold)
  for (int64_t i = 0; i < n; ++i) p[i] = p[i] / (1.0f + std::exp(-p[i]));
}

void gelu_tanh_(Tensor& x) {
  require_f32_contiguous(x, "gelu_tanh");
  float* p = x.data<float>();
  const int64_t n = x.numel();
  const float k = std::sqrt(2.0f / float(M_PI));
#pragma omp parallel for schedule(static) if (n > kParallelThreshold)
  for (int64_t i = 0; i < n; ++i) {
    const float v = p[i];
    p[i] = 0.5f * v * (1.0f + std::tanh(k * (v + 0.044715f * v * v * v)));
  }
}

void add_(Tensor& x, const Tensor& y) {
  require_f32_contiguous(x, "add");
  check(x.shape() == y.shape(), "add: shapes {} and {} differ", shape_string(x.shape()), shape_string(y.shape()));
  Tensor other = y.to(DType::F32);
  float* p = x.data<float>();
  const float* q = other.data<float>();
  for (int64_t i = 0; i < x.numel(); ++i) p[i] += q[i];
}

void mul_(Tensor& x, const Tensor& y) {
  require_f32_contiguous(x, "mul");
  check(x.shape() == y.shape(), "mul: shapes {} and {} differ", shape_string(x.shape()), shape_string(y.shape()));
  Tensor other = y.to(DType::F32);
  float* p = x.data<float>();
  const float* q = other.data<float>();
  for (int64_t i = 0; i < x.numel(); ++i) p[i] *= q[i];
}

void scale_(Tensor& x, float factor) {
  require_f32_contiguous(x, "scale");
  float* p = x.data<float>();
  for (int64_t i = 0; i < x.numel(); ++i) p[i] *= factor;
}

}  // namespace mmgen::ops
