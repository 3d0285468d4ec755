// The CPU implementations of the row-wise ops a DiT block is made of (core/ops.h): each is one
// OpenMP-parallel pass over the token rows, so a block touches its activations as few times as
// possible. Statistics in double (core/row_stats.h): rows are long (1536-5120).
#include <cmath>

#include "core/dtype.h"
#include "core/error.h"
#include "core/op_profile.h"
#include "core/ops.h"
#include "core/parallel.h"
#include "core/row_stats.h"
#ifdef MMGEN_HAVE_CUDA
#include "core/cuda/ops_cuda.h"
#endif

namespace mmgen::ops {
namespace {

void require_rows(const Tensor& x, const char* op) {
  check(x.dtype() == DType::F32 && x.is_contiguous() && x.is_cpu(),
        "{}: expects a contiguous float32 tensor on the CPU, got {} {}", op, dtype_name(x.dtype()),
        shape_string(x.shape()));
}

void require_vector(const Tensor& v, int64_t dim, const char* op, const char* what) {
  check(v.dtype() == DType::F32 && v.is_contiguous() && v.numel() == dim && v.is_cpu(),
        "{}: {} must be {} float32 values on the CPU, got {} {}", op, what, dim,
        dtype_name(v.dtype()), shape_string(v.shape()));
}

}  // namespace

Tensor weight_to_f32(const Tensor& weight) {
  if (weight.dtype() == DType::F32) return weight.contiguous();
  if (weight.dtype() != DType::BF16 || !weight.is_contiguous()) return weight.to(DType::F32);
  Tensor result = Tensor::empty(weight.shape(), DType::F32);
  const uint16_t* from = weight.data<uint16_t>();
  float* to = result.data<float>();
  const int64_t count = weight.numel();
  const int threads = threads_for(count);
#pragma omp parallel for schedule(static) num_threads(threads) if (threads > 1)
  for (int64_t i = 0; i < count; ++i) to[i] = bf16_to_f32(from[i]);
  return result;
}

Tensor modulated_layer_norm(const Tensor& x, const Tensor& shift, const Tensor& scale_plus_one,
                            float eps, DType out_dtype) {
#ifdef MMGEN_HAVE_CUDA
  if (x.device() == Device::CUDA)
    return cuda::ops::modulated_layer_norm(x, shift, scale_plus_one, eps, out_dtype);
#endif
  MMGEN_PROFILE("modulated_layer_norm");
  require_rows(x, "modulated_layer_norm");
  const int64_t dim = x.size(-1), rows = x.numel() / dim;
  require_vector(shift, dim, "modulated_layer_norm", "shift");
  require_vector(scale_plus_one, dim, "modulated_layer_norm", "scale");
  Tensor y = Tensor::empty(x.shape());
  const float* in = x.data<float>();
  const float* shift_values = shift.data<float>();
  const float* scale_values = scale_plus_one.data<float>();
  float* out = y.data<float>();
  const int threads = threads_for(rows * dim);
#pragma omp parallel for schedule(static) num_threads(threads) if (threads > 1)
  for (int64_t r = 0; r < rows; ++r) {
    const float* row = in + r * dim;
    const double mean = row_sum(row, dim) / double(dim);
    const double squares = row_squares_about(row, dim, mean);
    const float inv = float(1.0 / std::sqrt(squares / double(dim) + double(eps)));
    const float mean_f = float(mean);
    float* dst = out + r * dim;
    for (int64_t i = 0; i < dim; ++i)
      dst[i] = ((row[i] - mean_f) * inv) * scale_values[i] + shift_values[i];
  }
  return out_dtype == DType::F32 ? y : y.to(out_dtype);
}

void add_rms_norm_gated_(Tensor& x, const Tensor& y, const Tensor& weight, float eps,
                         const Tensor& gate) {
#ifdef MMGEN_HAVE_CUDA
  if (x.device() == Device::CUDA) return cuda::ops::add_rms_norm_gated_(x, y, weight, eps, gate);
#endif
  MMGEN_PROFILE("add_rms_norm_gated");
  add_gated_(x, rms_norm(y, weight, eps), gate);
}

Tensor add_rms_norm_gated_norm_(Tensor& x, const Tensor& y, const Tensor& weight, float eps,
                                const Tensor& gate, const Tensor& next_weight, float next_eps,
                                DType out) {
#ifdef MMGEN_HAVE_CUDA
  if (x.device() == Device::CUDA)
    return cuda::ops::add_rms_norm_gated_norm_(x, y, weight, eps, gate, next_weight, next_eps, out);
#endif
  MMGEN_PROFILE("add_rms_norm_gated_norm");
  add_rms_norm_gated_(x, y, weight, eps, gate);
  return rms_norm(x, next_weight, next_eps, out);
}

Tensor add_gated_layer_norm_(Tensor& x, const Tensor& y, const Tensor& gate, float eps,
                             const Tensor& scale, const Tensor& shift, DType out) {
#ifdef MMGEN_HAVE_CUDA
  if (x.device() == Device::CUDA)
    return cuda::ops::add_gated_layer_norm_(x, y, gate, eps, scale, shift, out);
#endif
  add_gated_(x, y, gate);
  return modulated_layer_norm(x, shift, scale, eps, out);
}

void add_gated_(Tensor& x, const Tensor& y, const Tensor& gate) {
#ifdef MMGEN_HAVE_CUDA
  if (x.device() == Device::CUDA) return cuda::ops::add_gated_(x, y, gate);
#endif
  MMGEN_PROFILE("add_gated");
  require_rows(x, "add_gated");
  require_rows(y, "add_gated");
  check(x.shape() == y.shape(), "add_gated: shapes {} and {} differ", shape_string(x.shape()),
        shape_string(y.shape()));
  const int64_t dim = x.size(-1), rows = x.numel() / dim;
  if (gate.defined()) require_vector(gate, dim, "add_gated", "gate");
  float* dst_all = x.data<float>();
  const float* src_all = y.data<float>();
  const float* g = gate.defined() ? gate.data<float>() : nullptr;
  const int threads = threads_for(rows * dim);
#pragma omp parallel for schedule(static) num_threads(threads) if (threads > 1)
  for (int64_t r = 0; r < rows; ++r) {
    float* dst = dst_all + r * dim;
    const float* src = src_all + r * dim;
    if (g) {
      for (int64_t i = 0; i < dim; ++i) dst[i] += src[i] * g[i];
    } else {
      for (int64_t i = 0; i < dim; ++i) dst[i] += src[i];
    }
  }
}

void rope_(Tensor& x, const Tensor& cos, const Tensor& sin, int64_t head_dim,
           int64_t rows_per_position) {
  MMGEN_PROFILE("rope");
  check(x.is_cpu(), "rope_: on the GPU the rotation runs fused with rms_norm_rope_");
  require_rows(x, "rope");
  const int64_t dim = x.size(-1), rows = x.numel() / dim, half = head_dim / 2;
  check(head_dim > 0 && head_dim % 2 == 0 && dim % head_dim == 0 && cos.dim() == 2 &&
            cos.size(1) == half && sin.shape() == cos.shape() && cos.size(0) > 0 &&
            cos.dtype() == DType::F32 && sin.dtype() == DType::F32 && rows_per_position > 0,
        "rope: tables {} for rows of {} with head size {}", shape_string(cos.shape()), dim,
        head_dim);
  const int64_t tokens = cos.size(0), heads = dim / head_dim;
  const Tensor c_table = cos.contiguous(), s_table = sin.contiguous();
  float* data = x.data<float>();
  const int threads = threads_for(rows * dim);
#pragma omp parallel for schedule(static) num_threads(threads) if (threads > 1)
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t position = (r / rows_per_position) % tokens;
    const float* c = c_table.data<float>() + position * half;
    const float* s = s_table.data<float>() + position * half;
    for (int64_t h = 0; h < heads; ++h) {
      float* v = data + r * dim + h * head_dim;
      for (int64_t j = 0; j < half; ++j) {
        const float x1 = v[2 * j], x2 = v[2 * j + 1];
        v[2 * j] = x1 * c[j] - x2 * s[j];
        v[2 * j + 1] = x1 * s[j] + x2 * c[j];
      }
    }
  }
}

void rope_half_(Tensor& x, const Tensor& cos, const Tensor& sin) {
  MMGEN_PROFILE("rope_half");
  check(x.dim() == 3 && cos.dim() == 2 && cos.size(0) == x.size(0) &&
            2 * cos.size(1) == x.size(2) && sin.shape() == cos.shape() &&
            cos.dtype() == DType::F32 && sin.dtype() == DType::F32 && cos.device() == x.device() &&
            sin.device() == x.device(),
        "rope_half: tables {} for x {}; expected float32 [tokens, head_dim / 2] on x's device",
        shape_string(cos.shape()), shape_string(x.shape()));
#ifdef MMGEN_HAVE_CUDA
  if (x.device() == Device::CUDA) return cuda::ops::rope_half_(x, cos, sin);
#endif
  require_rows(x, "rope_half");
  const int64_t tokens = x.size(0), heads = x.size(1), head_dim = x.size(2), half = head_dim / 2;
  const Tensor c_table = cos.contiguous(), s_table = sin.contiguous();
  const float* c_all = c_table.data<float>();
  const float* s_all = s_table.data<float>();
  float* data = x.data<float>();
  const int threads = threads_for(tokens * heads * head_dim);
#pragma omp parallel for schedule(static) num_threads(threads) if (threads > 1)
  for (int64_t t = 0; t < tokens; ++t) {
    const float* c = c_all + t * half;
    const float* s = s_all + t * half;
    for (int64_t h = 0; h < heads; ++h) {
      float* row = data + (t * heads + h) * head_dim;
      for (int64_t i = 0; i < half; ++i) {
        const float first = row[i], second = row[i + half];
        // x · cos + rotate_half(x) · sin, with rotate_half(x) = (-second, first).
        row[i] = first * c[i] + (-second) * s[i];
        row[i + half] = second * c[i] + first * s[i];
      }
    }
  }
}

void rms_norm_rope_(Tensor& x, const Tensor& weight, float eps, const Tensor& cos,
                    const Tensor& sin, int64_t head_dim, int64_t rows_per_position) {
#ifdef MMGEN_HAVE_CUDA
  if (x.device() == Device::CUDA)
    return cuda::ops::rms_norm_rope_(x, weight, eps, cos, sin, head_dim, rows_per_position);
#endif
  MMGEN_PROFILE("rms_norm_rope");
  require_rows(x, "rms_norm_rope");
  const int64_t dim = x.size(-1), rows = x.numel() / dim;
  const Tensor w = weight_to_f32(weight);
  require_vector(w, dim, "rms_norm_rope", "weight");
  float* data = x.data<float>();
  const float* wv = w.data<float>();
  const int threads = threads_for(rows * dim);
#pragma omp parallel for schedule(static) num_threads(threads) if (threads > 1)
  for (int64_t r = 0; r < rows; ++r) {
    float* row = data + r * dim;
    const float inv = float(1.0 / std::sqrt(row_squares(row, dim) / double(dim) + double(eps)));
    for (int64_t i = 0; i < dim; ++i) row[i] = (row[i] * inv) * wv[i];
  }
  if (cos.defined()) rope_(x, cos, sin, head_dim, rows_per_position);
}

}  // namespace mmgen::ops
