#include "core/ops.h"
// clang-format off
#include "core/x86_intrinsics.h"  // before anything that includes it: see there
// clang-format on

#include <Eigen/Core>
#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>

#include "core/error.h"
#include "core/gemm_cpu.h"
#include "core/low_rank.h"
#include "core/op_profile.h"
#include "core/parallel.h"
#include "core/row_stats.h"
#ifdef MMGEN_HAVE_CUDA
#include "core/cuda/ops_cuda.h"
#endif

// An op whose first tensor lives on the GPU returns its CUDA implementation's result.
#ifdef MMGEN_HAVE_CUDA
#define MMGEN_ON_DEVICE(x, call) \
  if ((x).device() == Device::CUDA) return cuda::ops::call
#else
#define MMGEN_ON_DEVICE(x, call)
#endif

namespace mmgen::ops {
namespace {

using RowMatrix = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using MapConst = Eigen::Map<const RowMatrix>;
using Map = Eigen::Map<RowMatrix>;

void require_f32_contiguous(const Tensor& x, const char* what) {
  check(x.dtype() == DType::F32 && x.is_contiguous(), "{}: expects a contiguous float32 tensor",
        what);
}

}  // namespace

Tensor as_f32(const Tensor& x) {
  return x.to(DType::F32);
}

void gemm(const float* a, const float* b, float* c, int64_t m, int64_t k, int64_t n) {
  Map(c, m, n).noalias() = MapConst(a, m, k) * MapConst(b, k, n);
}

void gemm_bt(const float* a, const float* b, float* c, int64_t m, int64_t k, int64_t n) {
  Map(c, m, n).noalias() = MapConst(a, m, k) * MapConst(b, n, k).transpose();
}

Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias, DType out) {
  if (weight.low_rank()) return linear_with_low_rank(x, weight, bias, out, nullptr);
  MMGEN_ON_DEVICE(x, linear(x, weight, bias, out));
  MMGEN_PROFILE("to compute dtype");
  Tensor y = linear(x, weight, bias);
  return out == DType::F32 ? y : y.to(out);
}

Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias, DType out,
              Activation activation) {
  if (weight.low_rank()) return linear_with_low_rank(x, weight, bias, out, &activation);
  MMGEN_ON_DEVICE(x, linear(x, weight, bias, out, activation));
  MMGEN_PROFILE("to compute dtype");
  Tensor y = linear(x, weight, bias);
  activate_(y, activation);
  return out == DType::F32 ? y : y.to(out);
}

std::vector<Tensor> linear_each(const Tensor& x, const std::vector<Tensor>& weights, DType out) {
  bool updates = false;
  for (const Tensor& weight : weights) updates = updates || weight.low_rank();
  if (updates) {
    // The plain products as they run without updates (one batched product on the GPU), each
    // weight's update added to its result (on the CPU, before the conversion to `out`).
    std::vector<Tensor> plain;
    for (const Tensor& weight : weights) plain.push_back(weight.without_low_rank());
    std::vector<Tensor> results = linear_each(x, plain, x.is_cpu() ? DType::F32 : out);
    for (size_t i = 0; i < weights.size(); ++i) {
      if (weights[i].low_rank()) add_low_rank_(results[i], x, *weights[i].low_rank());
      if (results[i].dtype() != out) results[i] = results[i].to(out);
    }
    return results;
  }
  MMGEN_ON_DEVICE(x, linear_each(x, weights, out));
  std::vector<Tensor> results;
  for (const Tensor& weight : weights) results.push_back(linear(x, weight, Tensor(), out));
  return results;
}

std::vector<Tensor> stack_weights(const std::vector<Tensor>& weights, DType dtype, Device device) {
  check(!weights.empty(), "stack_weights: no weights");
  const Shape& shape = weights.front().shape();
  for (const Tensor& weight : weights)
    check(weight.shape() == shape, "stack_weights: weights {} and {} differ in shape",
          shape_string(shape), shape_string(weight.shape()));
  Shape stacked_shape = shape;
  stacked_shape.insert(stacked_shape.begin(), int64_t(weights.size()));
  const Tensor stacked = Tensor::empty(stacked_shape, dtype, device);
  std::vector<Tensor> views;
  for (size_t i = 0; i < weights.size(); ++i) {
    views.push_back(stacked.select(0, int64_t(i)));
    views.back().copy_from(weights[i].to(dtype).without_low_rank());
    // A LoRA's update in the runtime mode stays with its weight (core/low_rank.h).
    views.back() = views.back().with_low_rank(low_rank_for(weights[i].low_rank(), device, dtype));
  }
  return views;
}

Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias) {
  if (weight.low_rank()) return linear_with_low_rank(x, weight, bias, DType::F32, nullptr);
  MMGEN_ON_DEVICE(x, linear(x, weight, bias, DType::F32));
  MMGEN_PROFILE("linear");
  require_f32_contiguous(x, "linear");
  check(weight.dim() == 2, "linear: weight must be 2-d, got {}", shape_string(weight.shape()));
  // Quantized weights hold blocks of 32 or 256 inputs (core/dtype.h).
  const int64_t in = weight.size(1) * dtype_block_values(weight.dtype()), out = weight.size(0);
  check(x.size(-1) == in, "linear: input {} does not match weight {}", shape_string(x.shape()),
        shape_string(weight.shape()));
  const int64_t rows = x.numel() / in;
  Shape out_shape = x.shape();
  out_shape.back() = out;
  Tensor y = Tensor::empty(out_shape);
  // The product reads float32, bfloat16, float16, e4m3 rows and quantized blocks as stored
  // (converted as it packs them).
  const bool packable = weight.dtype() == DType::F32 || weight.dtype() == DType::BF16 ||
                        weight.dtype() == DType::F16 || weight.dtype() == DType::F8E4M3Rows ||
                        dtype_is_blocks(weight.dtype());
  const Tensor w = packable ? weight.contiguous() : as_f32(weight).contiguous();
  Tensor b;
  if (bias.defined()) {
    check(bias.numel() == out, "linear: bias of {} for {} outputs", bias.numel(), out);
    b = as_f32(bias).contiguous();
  }
  cpu::linear_product(x.data<float>(), in, w.raw(), w.dtype(),
                      b.defined() ? b.data<float>() : nullptr, y.data<float>(), rows, in, out);
  return y;
}

Tensor layer_norm(const Tensor& x, float eps, const Tensor& weight, const Tensor& bias, DType out) {
  MMGEN_ON_DEVICE(x, layer_norm(x, eps, weight, bias, out));
  MMGEN_PROFILE("to compute dtype");
  Tensor y = layer_norm(x, eps, weight, bias);
  return out == DType::F32 ? y : y.to(out);
}

Tensor layer_norm(const Tensor& x, float eps, const Tensor& weight, const Tensor& bias) {
  MMGEN_ON_DEVICE(x, layer_norm(x, eps, weight, bias, DType::F32));
  MMGEN_PROFILE("layer_norm");
  require_f32_contiguous(x, "layer_norm");
  const int64_t dim = x.size(-1), rows = x.numel() / dim;
  Tensor y = Tensor::empty(x.shape());
  Tensor w = weight.defined() ? as_f32(weight) : Tensor(),
         b = bias.defined() ? as_f32(bias) : Tensor();
  const float* in = x.data<float>();
  float* out = y.data<float>();
  const int threads = threads_for(rows * dim);
  const float* wv = w.defined() ? w.data<float>() : nullptr;
  const float* bv = b.defined() ? b.data<float>() : nullptr;
#pragma omp parallel for schedule(static) num_threads(threads) if (threads > 1)
  for (int64_t r = 0; r < rows; ++r) {
    const float* row = in + r * dim;
    const double mean = row_sum(row, dim) / double(dim);
    const double variance = row_squares_about(row, dim, mean) / double(dim);
    const float inv = float(1.0 / std::sqrt(variance + double(eps)));
    const float mean_f = float(mean);
    float* dst = out + r * dim;
    for (int64_t i = 0; i < dim; ++i) {
      float value = (row[i] - mean_f) * inv;
      if (wv) value *= wv[i];
      if (bv) value += bv[i];
      dst[i] = value;
    }
  }
  return y;
}

Tensor rms_norm(const Tensor& x, const Tensor& weight, float eps, DType out_dtype) {
  MMGEN_ON_DEVICE(x, rms_norm(x, weight, eps, out_dtype));
  MMGEN_PROFILE("rms_norm");
  require_f32_contiguous(x, "rms_norm");
  const int64_t dim = x.size(-1), rows = x.numel() / dim;
  Tensor y = Tensor::empty(x.shape());
  Tensor w = weight.defined() ? as_f32(weight) : Tensor();
  const float* wv = w.defined() ? w.data<float>() : nullptr;
  const float* in = x.data<float>();
  float* out = y.data<float>();
  const int threads = threads_for(rows * dim);
#pragma omp parallel for schedule(static) num_threads(threads) if (threads > 1)
  for (int64_t r = 0; r < rows; ++r) {
    const float* row = in + r * dim;
    const float inv = float(1.0 / std::sqrt(row_squares(row, dim) / double(dim) + double(eps)));
    float* dst = out + r * dim;
    for (int64_t i = 0; i < dim; ++i) dst[i] = row[i] * inv * (wv ? wv[i] : 1.0f);
  }
  return out_dtype == DType::F32 ? y : y.to(out_dtype);
}

void activate_(Tensor& x, Activation activation) {
  MMGEN_ON_DEVICE(x, activate_(x, activation));
  MMGEN_PROFILE("activation");
  switch (activation) {
    case Activation::GeluTanh:
      return gelu_tanh_(x);
    case Activation::Silu:
      return silu_(x);
    case Activation::Relu:
    case Activation::Gelu:
      break;
  }
  require_f32_contiguous(x, "activation");
  float* p = x.data<float>();
  const int64_t n = x.numel();
  if (activation == Activation::Relu) {
    const int threads = threads_for(n);
#pragma omp parallel for schedule(static) num_threads(threads) if (threads > 1)
    for (int64_t i = 0; i < n; ++i) p[i] = p[i] > 0.0f ? p[i] : 0.0f;
  } else {  // the exact (erf) GELU
    const int threads = threads_for(n);
#pragma omp parallel for schedule(static) num_threads(threads) if (threads > 1)
    for (int64_t i = 0; i < n; ++i) p[i] = 0.5f * p[i] * (1.0f + std::erf(p[i] * float(M_SQRT1_2)));
  }
}

// The activations' exp and tanh are Eigen's vectorised ones, run over chunks (in parallel when
// there are many): within 3e-7 relative of the exact values (glibc's scalar expf and
// tanhf: 1.7e-7), 13x (exp) and 50x (tanh) faster on AVX-512. The scalar tanh of the GELU was a
// third of a wan-shapes denoising step on the CPU. apply(out, in, other) on matching chunks of
// `in`, `other` (a second input, or null) and `out` (the same array as `in` for an in-place op).
// Eigen computes a length's last few values (past its last whole packet) with the scalar
// functions, which round differently: those go through the packet path too, from a padded copy,
// so a value never depends on where it sits in its tensor (a sequence shard's last row is the
// whole sequence's row to the bit).
template <typename Apply>
void apply_to_chunk(const float* in, const float* other, float* out, int64_t size, Apply apply) {
  constexpr int64_t kPad = 64;  // a whole number of packets on any target
  using Map = Eigen::Map<Eigen::ArrayXf>;
  using ConstMap = Eigen::Map<const Eigen::ArrayXf>;
  const int64_t whole = size / kPad * kPad, tail = size - whole;
  if (whole > 0) {
    Map to(out, whole);
    apply(to, ConstMap(in, whole), ConstMap(other ? other : in, whole));
  }
  if (tail > 0) {
    // Aligned, so Eigen runs all of them as packets (it does an unaligned array's first
    // values one by one, and where a stack array lands varies: under ASan from call to call).
    alignas(64) float padded_in[kPad] = {}, padded_other[kPad] = {}, padded_out[kPad];
    std::copy_n(in + whole, tail, padded_in);
    if (other) std::copy_n(other + whole, tail, padded_other);
    Map to(padded_out, kPad);
    apply(to, ConstMap(padded_in, kPad), ConstMap(padded_other, kPad));
    std::copy_n(padded_out, tail, out + whole);
  }
}

constexpr int64_t kChunk = 4096;

template <typename Apply>
void apply_in_chunks(const float* in, const float* other, float* out, int64_t n, Apply apply) {
  const int64_t chunks = (n + kChunk - 1) / kChunk;
  const int threads = threads_for(n);
#pragma omp parallel for schedule(static) num_threads(threads) if (threads > 1)
  for (int64_t c = 0; c < chunks; ++c) {
    const int64_t begin = c * kChunk;
    apply_to_chunk(in + begin, other ? other + begin : nullptr, out + begin,
                   std::min(kChunk, n - begin), apply);
  }
}

// silu(x) = x / (1 + e^−x), in the order silu_mul repeats.
template <typename Array>
auto silu_of(const Array& v) {
  return v / (1.0f + (-v).exp());
}

void silu_values(float* values, int64_t n) {
  for (int64_t begin = 0; begin < n; begin += kChunk)
    apply_to_chunk(values + begin, nullptr, values + begin, std::min(kChunk, n - begin),
                   [](auto& to, const auto& v, const auto&) { to = silu_of(v); });
}

void silu_(Tensor& x) {
  MMGEN_ON_DEVICE(x, activate_(x, Activation::Silu));
  MMGEN_PROFILE("silu");
  require_f32_contiguous(x, "silu");
  float* p = x.data<float>();
  apply_in_chunks(p, nullptr, p, x.numel(),
                  [](auto& to, const auto& v, const auto&) { to = silu_of(v); });
}

void gelu_tanh_(Tensor& x) {
  MMGEN_ON_DEVICE(x, activate_(x, Activation::GeluTanh));
  MMGEN_PROFILE("gelu_tanh");
  require_f32_contiguous(x, "gelu_tanh");
  const float k = std::sqrt(2.0f / float(M_PI));
  float* p = x.data<float>();
  apply_in_chunks(p, nullptr, p, x.numel(), [k](auto& to, const auto& v, const auto&) {
    to = 0.5f * v * (1.0f + (k * (v + 0.044715f * v * v * v)).tanh());
  });
}

void add_(Tensor& x, const Tensor& y) {
  MMGEN_ON_DEVICE(x, add_(x, y));
  MMGEN_PROFILE("add");
  require_f32_contiguous(x, "add");
  check(x.shape() == y.shape(), "add: shapes {} and {} differ", shape_string(x.shape()),
        shape_string(y.shape()));
  Tensor other = y.to(DType::F32);
  float* p = x.data<float>();
  const float* q = other.data<float>();
  const int64_t n = x.numel();
  for (int64_t i = 0; i < n; ++i) p[i] += q[i];
}

void mul_(Tensor& x, const Tensor& y) {
  MMGEN_ON_DEVICE(x, mul_(x, y));
  MMGEN_PROFILE("mul");
  require_f32_contiguous(x, "mul");
  check(x.shape() == y.shape(), "mul: shapes {} and {} differ", shape_string(x.shape()),
        shape_string(y.shape()));
  Tensor other = y.to(DType::F32);
  float* p = x.data<float>();
  const float* q = other.data<float>();
  const int64_t n = x.numel();
  for (int64_t i = 0; i < n; ++i) p[i] *= q[i];
}

Tensor silu_mul(const Tensor& gate, const Tensor& up, DType out) {
  MMGEN_ON_DEVICE(gate, silu_mul(gate, up, out));
  MMGEN_PROFILE("silu_mul");
  check(gate.shape() == up.shape(), "silu_mul: shapes {} and {} differ", shape_string(gate.shape()),
        shape_string(up.shape()));
  check(up.is_cpu(), "silu_mul: the gate is on the CPU and the up projection on {}",
        device_name(up.device()));
  // The float32 values silu_ then mul_ would leave (the same expressions, rounded in the same
  // order), so a model switching to this op keeps its CPU numbers bit for bit.
  const Tensor g = gate.to(DType::F32).contiguous(), u = up.to(DType::F32).contiguous();
  Tensor y = Tensor::empty(gate.shape());
  const float* gv = g.data<float>();
  const float* uv = u.data<float>();
  apply_in_chunks(
      gv, uv, y.data<float>(), y.numel(),
      [](auto& to, const auto& v, const auto& up_values) { to = silu_of(v) * up_values; });
  return out == DType::F32 ? y : y.to(out);
}

// Checks the pair layout on every device; returns (groups, pairs, dim).
std::array<int64_t, 3> fold_scale_gate_layout(const Tensor& modulation, const Tensor& norms) {
  check(modulation.dtype() == DType::F32 && norms.dtype() == DType::F32 &&
            modulation.device() == norms.device(),
        "fold_scale_gate: modulation and norms must be float32 on one device, got {} on {} and {} "
        "on {}",
        dtype_name(modulation.dtype()), device_name(modulation.device()), dtype_name(norms.dtype()),
        device_name(norms.device()));
  check(modulation.dim() >= 2 && modulation.dim() == norms.dim() &&
            modulation.size(-1) == norms.size(-1) && modulation.size(-2) == 2 * norms.size(-2) &&
            modulation.numel() == 2 * norms.numel(),
        "fold_scale_gate: modulation {} is not (scale, gate) pairs over norms {}",
        shape_string(modulation.shape()), shape_string(norms.shape()));
  const int64_t dim = norms.size(-1), pairs = norms.size(-2);
  return {norms.numel() / (dim * pairs), pairs, dim};
}

Tensor fold_scale_gate(const Tensor& modulation, const Tensor& norms) {
  MMGEN_ON_DEVICE(modulation, fold_scale_gate(modulation, norms));
  const auto [groups, pairs, dim] = fold_scale_gate_layout(modulation, norms);
  const Tensor m = modulation.contiguous(), w = norms.contiguous();
  Tensor out = Tensor::empty(modulation.shape());
  for (int64_t p = 0; p < groups * pairs; ++p) {
    const float* scale = m.data<float>() + 2 * p * dim;
    const float* norm = w.data<float>() + p * dim;
    float* folded = out.data<float>() + 2 * p * dim;
    for (int64_t i = 0; i < dim; ++i) {
      folded[i] = norm[i] * (1.0f + scale[i]);
      folded[dim + i] = std::tanh(scale[dim + i]);
    }
  }
  return out;
}

Tensor random_uniform(const Shape& shape, DType dtype, Device device, uint64_t seed, float scale) {
#ifdef MMGEN_HAVE_CUDA
  if (device == Device::CUDA) return cuda::ops::random_uniform(shape, dtype, seed, scale);
#endif
  check(dtype == DType::BF16 || dtype == DType::F32, "random_uniform: bf16 or float32, not {}",
        dtype_name(dtype));
  Tensor values = Tensor::empty(shape, dtype, device);
  const int64_t count = values.numel();
  // The hash and arithmetic of the GPU fill (core/cuda/t5_ops.cu), value for value; the bf16
  // values are rounded from the float32 ones, so float32 is their float32 form.
  const int threads = threads_for(count);
#pragma omp parallel for schedule(static) num_threads(threads) if (threads > 1)
  for (int64_t i = 0; i < count; ++i) {
    uint64_t z = seed * 0x9e3779b97f4a7c15ull + uint64_t(i);  // splitmix64's finaliser
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    const float unit = float(z >> 40) * (1.0f / 16777216.0f);  // [0, 1)
    const float value = bf16_to_f32(f32_to_bf16((2.0f * unit - 1.0f) * scale));
    if (dtype == DType::BF16)
      values.data<uint16_t>()[i] = f32_to_bf16(value);
    else
      values.data<float>()[i] = value;
  }
  return values;
}

Tensor repeat_rows(const Tensor& x, int64_t times) {
  MMGEN_ON_DEVICE(x, repeat_rows(x, times));
  check(times >= 1 && x.dim() >= 1 && x.is_contiguous(),
        "repeat_rows: a contiguous tensor and a count of at least 1 (got {} and {})",
        shape_string(x.shape()), times);
  Shape shape = x.shape();
  shape[0] *= times;
  Tensor out = Tensor::empty(shape, x.dtype());
  const size_t row = x.nbytes() / size_t(std::max<int64_t>(x.size(0), 1));
  const std::byte* from = x.raw();
  std::byte* to = out.raw();
  for (int64_t r = 0; r < x.size(0); ++r)
    for (int64_t j = 0; j < times; ++j)
      std::memcpy(to + (size_t(r * times + j)) * row, from + size_t(r) * row, row);
  return out;
}

void scale_(Tensor& x, float factor) {
  MMGEN_ON_DEVICE(x, scale_(x, factor));
  MMGEN_PROFILE("scale");
  require_f32_contiguous(x, "scale");
  float* p = x.data<float>();
  const int64_t n = x.numel();
  for (int64_t i = 0; i < n; ++i) p[i] *= factor;
}

}  // namespace mmgen::ops
