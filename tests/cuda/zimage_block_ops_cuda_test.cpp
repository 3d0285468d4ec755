// The two element-wise ops of a Z-Image block that run between its products on the GPU, against
// the CPU ops on the same bf16-rounded inputs, then timed at Z-Image-Turbo's sizes (4160 tokens,
// 30 heads of 128, feed-forward width 10240):
// - ops::rms_norm_rope_ on bf16 rows: the warp-per-row kernel (rows up to 512 wide: q/k one row
//   per head) at widths 16, 64, 128, 320 and 512, without tables, with one table row per row and
//   with fewer table rows than rows (row r reads table row r mod tokens), row counts that do not
//   fill the last block; and Wan's full hidden width (1536, 5120) on the one-pass wide-row kernel,
//   a width it does not take on the block-per-row kernel.
// - ops::add_gated_layer_norm_ and ops::modulated_layer_norm (Wan's residual update with the next
//   pre-norm, and the norm alone) against the CPU ops, at widths that reach each register-slot
//   count of the one-pass kernel and at widths it hands to the separate kernels.
//   The CPU computes in float32 (double sums), the GPU in float32 with one bf16 rounding of the
//   result: they agree to that rounding, 2⁻⁸ relative per value.
// - ops::silu_mul with bf16 and float32 inputs and outputs on odd sizes (the element-by-element
//   tail), an unaligned view (no 16-byte loads) and a size of whole 8-value groups: float32
//   results within 1e-6 relative of the CPU (expf against std::exp), bf16 ones within its
//   rounding.
// - FP8 products (Wan's --gpu-matmul-precision fp8): the norms writing e4m3 rows with their
//   scales, and ops::linear / linear_each with f8_e4m3_rows weights (check_fp8_norm,
//   check_fp8_linear say what each asserts).
// - ops::fold_scale_gate against the CPU's, and ops::linear_each on stacked weights (one batched
//   product) against the CPU's products and against one GPU product per weight.
#include <cuda_runtime.h>
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "core/ops.h"
#include "core/tensor.h"
#include "cuda_test_support.h"

using namespace mmgen;
using namespace mmgen::cuda_testing;

namespace {

// Standard-normal values already rounded to bf16, as a float32 host tensor.
Tensor random_rounded(const Shape& shape, std::mt19937& generator, float scale = 1.0f) {
  const Bf16Values values = random_bf16(size_t(shape_numel(shape)), generator);
  std::vector<float> scaled(values.values.size());
  // A power-of-two scale keeps the values bf16-exact.
  for (size_t i = 0; i < scaled.size(); ++i) scaled[i] = values.values[i] * scale;
  return Tensor::from_vector(shape, scaled);
}

// `dim` values uniform in [0.5, 1.5): norm weights, modulations and gates.
Tensor random_around_one(int64_t dim, std::mt19937& generator) {
  std::uniform_real_distribution<float> around_one(0.5f, 1.5f);
  std::vector<float> v(static_cast<size_t>(dim));
  for (float& value : v) value = around_one(generator);
  return Tensor::from_vector({dim}, v);
}

// max over values of |actual − expected| / (2⁻⁸ · |expected| + floor): ≤ 1 when every value is
// within a bf16 rounding (plus float32 noise near zero); and ‖actual − expected‖ / ‖expected‖.
struct Agreement {
  double worst = 0, relative = 0;
};
Agreement compare(const Tensor& gpu, const Tensor& expected, double relative_bound, double floor) {
  const Tensor actual = gpu.to(Device::CPU).to(DType::F32);
  if (actual.shape() != expected.shape()) return {INFINITY, INFINITY};
  Agreement result;
  double difference = 0, norm = 0;
  for (int64_t i = 0; i < expected.numel(); ++i) {
    const double a = actual.data<float>()[i], e = expected.data<float>()[i];
    if (!std::isfinite(a)) return {INFINITY, INFINITY};
    result.worst = std::max(result.worst, std::abs(a - e) / (relative_bound * std::abs(e) + floor));
    difference += (a - e) * (a - e);
    norm += e * e;
  }
  result.relative = std::sqrt(difference / (norm > 0 ? norm : 1.0));
  return result;
}

void check_rms_norm_rope(int64_t rows, int64_t dim, int64_t head_dim, int64_t tokens,
                         std::mt19937& generator, int64_t rows_per_position = 1) {
  const Tensor x = random_rounded({rows, dim}, generator, 4.0f);
  std::vector<float> weight(static_cast<size_t>(dim));
  std::uniform_real_distribution<float> around_one(0.5f, 1.5f);
  for (float& w : weight) w = around_one(generator);
  const Tensor w = Tensor::from_vector({dim}, weight);
  Tensor cos, sin;
  if (tokens > 0) {
    std::vector<float> c(size_t(tokens * head_dim / 2)), s(c.size());
    std::uniform_real_distribution<float> angle(-3.2f, 3.2f);
    for (size_t i = 0; i < c.size(); ++i) {
      const float a = angle(generator);
      c[i] = std::cos(a), s[i] = std::sin(a);
    }
    cos = Tensor::from_vector({tokens, head_dim / 2}, c);
    sin = Tensor::from_vector({tokens, head_dim / 2}, s);
  }
  Tensor expected = x.clone();
  ops::rms_norm_rope_(expected, w, 1e-5f, cos, sin, head_dim, rows_per_position);
  Tensor actual = x.to(DType::BF16).to(Device::CUDA);
  ops::rms_norm_rope_(actual, w.to(Device::CUDA), 1e-5f,
                      cos.defined() ? cos.to(Device::CUDA) : Tensor(),
                      sin.defined() ? sin.to(Device::CUDA) : Tensor(), head_dim, rows_per_position);
  const Agreement agreement = compare(actual, expected, 1.0 / 256, 1e-5);
  const std::string tables = tokens == 0
                                 ? "no tables"
                                 : fmt::format("tables of {} rows (head size {}, {} rows each)",
                                               tokens, head_dim, rows_per_position);
  expect(actual.dtype() == DType::BF16 && agreement.worst <= 1.0,
         fmt::format("rms_norm_rope [{}, {}], {}: within a bf16 rounding of the CPU (worst {:.2f} "
                     "of it), relative error {:.2e}",
                     rows, dim, tables, agreement.worst, agreement.relative));
}

// A residual update fused with the next pre-norm (x += f(y), then the norm of the new x) as
// `update` runs it on the CPU (float32) and on the GPU (y in y_dtype, a bf16 result), with two
// norm or modulation vectors a and b and, when gated, a gate (values around one): x within float32
// noise of the CPU, the normed rows within a bf16 rounding.
using ResidualUpdate = std::function<Tensor(Tensor& x, const Tensor& y, const Tensor& a,
                                            const Tensor& b, const Tensor& gate, DType out)>;
void check_residual_update(const std::string& name, const ResidualUpdate& update, int64_t rows,
                           int64_t dim, DType y_dtype, bool gated, std::mt19937& generator) {
  const Tensor x = random_rounded({rows, dim}, generator, 4.0f);
  const Tensor y = random_rounded({rows, dim}, generator);
  const auto vector = [&] { return random_around_one(dim, generator); };
  const Tensor a = vector(), b = vector(), gate = gated ? vector() : Tensor();
  Tensor expected_x = x.clone();
  const Tensor expected = update(expected_x, y, a, b, gate, DType::F32);
  Tensor actual_x = x.to(Device::CUDA);
  const Tensor actual =
      update(actual_x, y.to(y_dtype).to(Device::CUDA), a.to(Device::CUDA), b.to(Device::CUDA),
             gated ? gate.to(Device::CUDA) : Tensor(), DType::BF16);
  const Agreement updated = compare(actual_x, expected_x, 1e-6, 1e-6);
  const Agreement normed = compare(actual, expected, 1.0 / 256, 1e-5);
  expect(actual.dtype() == DType::BF16 && updated.worst <= 1.0 && normed.worst <= 1.0,
         fmt::format("{} [{}, {}] {} y{}: x within 1e-6 of the CPU (worst {:.2f} of it), the next "
                     "pre-norm within a bf16 rounding (worst {:.2f}, relative error {:.2e})",
                     name, rows, dim, dtype_name(y_dtype), gated ? ", gated" : "", updated.worst,
                     normed.worst, normed.relative));
}

// Z-Image's post-norm joining the residual, then the next RMSNorm (ops::add_rms_norm_gated_norm_).
void check_add_rms_norm_gated_norm(int64_t rows, int64_t dim, DType y_dtype, bool gated,
                                   std::mt19937& generator) {
  check_residual_update(
      "add_rms_norm_gated_norm",
      [](Tensor& x, const Tensor& y, const Tensor& weight, const Tensor& next_weight,
         const Tensor& gate, DType out) {
        return ops::add_rms_norm_gated_norm_(x, y, weight, 1e-5f, gate, next_weight, 1e-6f, out);
      },
      rows, dim, y_dtype, gated, generator);
}

// Wan's residual update fused with the next LayerNorm (ops::add_gated_layer_norm_), and the
// modulated LayerNorm alone. The widths reach each register-slot count of the one-pass kernel
// (wide_rows.cu), 1 and 4 warps per row, and the fallbacks (a width not a multiple of 4, one wider
// than 12288).
void check_add_gated_layer_norm(int64_t rows, int64_t dim, DType y_dtype, bool gated,
                                std::mt19937& generator) {
  check_residual_update(
      "add_gated_layer_norm",
      [](Tensor& x, const Tensor& y, const Tensor& scale, const Tensor& shift, const Tensor& gate,
         DType out) { return ops::add_gated_layer_norm_(x, y, gate, 1e-6f, scale, shift, out); },
      rows, dim, y_dtype, gated, generator);
  const Tensor x = random_rounded({rows, dim}, generator, 4.0f);
  const Tensor scale = random_rounded({dim}, generator), shift = random_rounded({dim}, generator);
  const Tensor expected = ops::modulated_layer_norm(x, shift, scale, 1e-6f);
  const Tensor actual = ops::modulated_layer_norm(x.to(Device::CUDA), shift.to(Device::CUDA),
                                                  scale.to(Device::CUDA), 1e-6f, DType::BF16);
  const Agreement alone = compare(actual, expected, 1.0 / 256, 1e-5);
  expect(alone.worst <= 1.0,
         fmt::format("modulated_layer_norm [{}, {}]: within a bf16 rounding of the CPU (worst "
                     "{:.2f} of it)",
                     rows, dim, alone.worst));
}

// Wan's norms writing an FP8 product's input (f8_e4m3_rows): the residual update with the next
// pre-norm, and the modulated norm alone, against the CPU's float32 norm. Each row's scale is
// within float32 noise of max|row| / 448; each value within e4m3's rounding of the CPU's (half a
// step: |v| / 16 in its binade, scale · 2⁻¹⁰ among the subnormals), plus a bf16 rounding where
// the width goes to the separate kernels (they round to bf16 first, so their scales are within
// a bf16 rounding too). Where the one-pass kernel
// quantizes the float32 row itself, a byte may differ from the host's rounding of the CPU's
// value only by one step, where float32 noise moves a value across a rounding boundary.
void check_fp8_norm(int64_t rows, int64_t dim, bool update, std::mt19937& generator) {
  const Tensor x = random_rounded({rows, dim}, generator, 4.0f);
  const Tensor y = random_rounded({rows, dim}, generator);
  const auto vector = [&] { return random_around_one(dim, generator); };
  const Tensor scale = vector(), shift = vector(), gate = vector();
  Tensor expected_x = x.clone(), actual_x = x.to(Device::CUDA);
  const Tensor expected =
      update ? ops::add_gated_layer_norm_(expected_x, y, gate, 1e-6f, scale, shift, DType::F32)
             : ops::modulated_layer_norm(x, shift, scale, 1e-6f);
  const Tensor gpu =
      update ? ops::add_gated_layer_norm_(actual_x, y.to(DType::BF16).to(Device::CUDA),
                                          gate.to(Device::CUDA), 1e-6f, scale.to(Device::CUDA),
                                          shift.to(Device::CUDA), DType::F8E4M3Rows)
             : ops::modulated_layer_norm(actual_x, shift.to(Device::CUDA), scale.to(Device::CUDA),
                                         1e-6f, DType::F8E4M3Rows);
  const Tensor actual = gpu.to(Device::CPU);
  const Tensor values = actual.to(DType::F32);
  // The GPU's expansion (what a bf16 product reading these rows gets) is the host's, to the bit.
  const Tensor gpu_f32 = gpu.to(DType::F32).to(Device::CPU);
  const Tensor gpu_bf16 = gpu.to(DType::BF16).to(Device::CPU), host_bf16 = values.to(DType::BF16);
  const bool same_expansion = std::memcmp(gpu_f32.raw(), values.raw(), values.nbytes()) == 0 &&
                              std::memcmp(gpu_bf16.raw(), host_bf16.raw(), host_bf16.nbytes()) == 0;
  const bool one_pass = dim % 4 == 0 && dim <= 12288;
  const uint8_t* bytes = reinterpret_cast<const uint8_t*>(actual.raw());
  double worst_scale = 0, worst_value = 0;
  int64_t flipped = 0, far = 0;
  for (int64_t r = 0; r < rows; ++r) {
    const float* e = expected.data<float>() + r * dim;
    float amax = 0;
    for (int64_t c = 0; c < dim; ++c) amax = std::max(amax, std::fabs(e[c]));
    const float s = actual.row_scales()[r];
    worst_scale = std::max(worst_scale, std::fabs(s - amax / 448.0) / (amax / 448.0));
    for (int64_t c = 0; c < dim; ++c) {
      const double v = values.data<float>()[r * dim + c];
      const double allowed = std::fabs(e[c]) * (1.0 / 16 + (one_pass ? 1e-5 : 1.0 / 256)) +
                             s * std::ldexp(1.0, -10) + 1e-6;
      worst_value = std::max(worst_value, std::fabs(v - e[c]) / allowed);
      const uint8_t host = f32_to_e4m3(e[c] / s), got = bytes[r * dim + c];
      // e4m3's codes order like the values on each side of zero: steps apart = codes apart.
      const auto line = [](uint8_t b) { return (b & 0x80) ? -int(b & 0x7f) : int(b & 0x7f); };
      flipped += host != got;
      far += std::abs(line(host) - line(got)) > 1;
    }
  }
  // The separate kernels' bf16 rows set the scale from bf16-rounded values: 2⁻⁸ apart at most.
  const bool bytes_ok = !one_pass || (far == 0 && flipped * 1000 <= rows * dim);
  const double scale_bound = one_pass ? 1e-5 : 1.0 / 256;
  expect(
      gpu.dtype() == DType::F8E4M3Rows && worst_scale < scale_bound && worst_value <= 1.0 &&
          bytes_ok && same_expansion,
      fmt::format("{} [{}, {}] to f8_e4m3_rows: row scales within {:.1e} of max|row| / 448, "
                  "values within e4m3's rounding of the CPU's (worst {:.2f} of it); {} of {} "
                  "bytes differ from the host's rounding, {} by more than one step; the "
                  "GPU's float32 and bf16 expansions {} the host's",
                  update ? "add_gated_layer_norm" : "modulated_layer_norm", rows, dim, worst_scale,
                  worst_value, flipped, rows * dim, far, same_expansion ? "equal" : "differ from"));
}

// ops::linear with an f8_e4m3_rows weight (Wan's --gpu-matmul-precision fp8): the GPU quantizes
// the bf16 weight per output channel and the bf16 input per token byte for byte as the host does,
// and the product matches the CPU's float32 product of the dequantized operands to the output's
// rounding (the relative error bound of fp8_cuda_test). An input that arrives quantized gives the
// same bits, and linear_each the same as one product per weight.
void check_fp8_linear(int64_t rows, int64_t in, int64_t features, DType out, bool gelu,
                      std::mt19937& generator) {
  const Tensor x = random_rounded({rows, in}, generator);
  const Tensor w = random_rounded({features, in}, generator, 1.0f / 16);
  const Tensor bias = random_rounded({features}, generator, 1.0f / 4);
  const Tensor host_w8 = w.to(DType::F8E4M3Rows);
  const Tensor w8 = w.to(DType::BF16).to(Device::CUDA).to(DType::F8E4M3Rows);
  const Tensor w8_back = w8.to(Device::CPU);
  const bool same_weight = w8_back.nbytes() == host_w8.nbytes() &&
                           std::memcmp(w8_back.raw(), host_w8.raw(), host_w8.nbytes()) == 0;
  const Tensor xq = x.to(DType::F8E4M3Rows).to(DType::F32), wq = host_w8.to(DType::F32);
  const Tensor expected = gelu ? ops::linear(xq, wq, bias, DType::F32, Activation::GeluTanh)
                               : ops::linear(xq, wq, bias, DType::F32);
  const Tensor x_gpu = x.to(DType::BF16).to(Device::CUDA), b_gpu = bias.to(Device::CUDA);
  const auto run = [&](const Tensor& input) {
    return gelu ? ops::linear(input, w8, b_gpu, out, Activation::GeluTanh)
                : ops::linear(input, w8, b_gpu, out);
  };
  const Tensor actual = run(x_gpu);
  const Tensor from_quantized = run(x_gpu.to(DType::F8E4M3Rows));
  const Tensor a = actual.to(Device::CPU), q = from_quantized.to(Device::CPU);
  const bool same_bits = a.nbytes() == q.nbytes() && std::memcmp(a.raw(), q.raw(), a.nbytes()) == 0;
  const double error = relative_error(a.to(DType::F32), expected);
  expect(actual.dtype() == out && same_weight && same_bits && error < 4e-3,
         fmt::format("linear with an f8_e4m3_rows weight {}x{}x{}{} to {}: weight bytes and scales "
                     "{} the host's, {:.2e} from the product of the dequantized operands (< 4e-3), "
                     "a quantized input {}",
                     rows, features, in, gelu ? " (GELU)" : "", dtype_name(out),
                     same_weight ? "equal" : "differ from", error,
                     same_bits ? "gives the same bits" : "gives other bits"));
  if (gelu) return;
  const std::vector<Tensor> each = ops::linear_each(x_gpu, {w8, w8}, out);
  const Tensor one = ops::linear(x_gpu, w8, Tensor(), out).to(Device::CPU);
  bool same = each.size() == 2;
  for (const Tensor& e : each) {
    const Tensor host = e.to(Device::CPU);
    same = same && host.nbytes() == one.nbytes() &&
           std::memcmp(host.raw(), one.raw(), one.nbytes()) == 0;
  }
  expect(same, fmt::format("linear_each with f8_e4m3_rows weights {}x{}x{}: one product per weight "
                           "from one quantized input, the same bits as ops::linear",
                           rows, features, in));
}

void check_silu_mul(const Shape& shape, DType gate_dtype, DType up_dtype, DType out, int64_t skip,
                    std::mt19937& generator) {
  // `skip` values cut off the front: a view 2 or 4 bytes past an aligned allocation.
  const int64_t count = shape_numel(shape);
  const Tensor gate_all = random_rounded({count + skip}, generator, 2.0f);
  const Tensor up_all = random_rounded({count + skip}, generator);
  const Tensor gate = gate_all.slice(0, skip, count + skip).view(shape);
  const Tensor up = up_all.slice(0, skip, count + skip).view(shape);
  const Tensor expected = ops::silu_mul(gate.contiguous(), up.contiguous());
  const Tensor gpu_gate = gate_all.to(gate_dtype).to(Device::CUDA).slice(0, skip, count + skip);
  const Tensor gpu_up = up_all.to(up_dtype).to(Device::CUDA).slice(0, skip, count + skip);
  const Tensor actual = ops::silu_mul(gpu_gate.view(shape), gpu_up.view(shape), out);
  const bool rounded = out == DType::BF16;
  const Agreement agreement = compare(actual, expected, rounded ? 1.0 / 256 : 1e-6, 1e-30);
  expect(actual.dtype() == out && actual.shape() == shape && agreement.worst <= 1.0,
         fmt::format("silu_mul {} {} · {} → {}{}: within {} of the CPU (worst {:.2f} of it), "
                     "relative error {:.2e}",
                     shape_string(shape), dtype_name(gate_dtype), dtype_name(up_dtype),
                     dtype_name(out), skip ? fmt::format(", view at +{}", skip) : "",
                     rounded ? "a bf16 rounding" : "1e-6", agreement.worst, agreement.relative));
}

double milliseconds_per_call(const std::function<void()>& call) {
  for (int i = 0; i < 3; ++i) call();  // warm-up
  cudaDeviceSynchronize();
  const int calls = 20;
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < calls; ++i) call();
  cudaDeviceSynchronize();
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
             .count() /
         calls;
}

// Z-Image-Turbo at 1024² (4096 image + 64 caption tokens): the q/k normalisation of one block
// (the tables hold a row per (token, head), as the model builds them) and its feed-forward gate,
// with the float32 silu_, mul_ and bf16 conversion it replaces for comparison.
// fold_scale_gate on the GPU against the CPU's: the scale rows exact up to the multiply's
// rounding, the gates within tanhf's few ulps; 34 blocks of Turbo's width and an odd small one.
void check_fold_scale_gate(int64_t groups, int64_t pairs, int64_t dim, std::mt19937& generator) {
  const Tensor modulation = random_rounded({groups, 2 * pairs, dim}, generator, 3.0f);
  const Tensor norms = random_rounded({groups, pairs, dim}, generator);
  const Tensor expected = ops::fold_scale_gate(modulation, norms);
  const Tensor actual =
      ops::fold_scale_gate(modulation.to(Device::CUDA), norms.to(Device::CUDA)).to(Device::CPU);
  const Agreement agreement = compare(actual, expected, 1e-6, 1e-30);
  expect(actual.shape() == expected.shape() && agreement.worst <= 1.0,
         fmt::format("fold_scale_gate [{}, {}, {}]: within 1e-6 of the CPU (worst {:.2f} of it)",
                     groups, 2 * pairs, dim, agreement.worst));
}

// linear_each: weights stacked by ops::stack_weights run as one batched product; the results
// must be the CPU's float32 products of the same bf16 inputs within the output's rounding (bf16)
// or float32 summation noise, and agree with one GPU product per weight (the unstacked path).
void check_linear_each(int64_t rows, int64_t features, int64_t in, int64_t count, DType out,
                       std::mt19937& generator) {
  const Tensor x = random_rounded({rows, in}, generator);
  std::vector<Tensor> weights, separate;
  for (int64_t i = 0; i < count; ++i) {
    weights.push_back(random_rounded({features, in}, generator, 0.0625f));
    separate.push_back(weights.back().to(DType::BF16).to(Device::CUDA));
  }
  const std::vector<Tensor> stacked = ops::stack_weights(weights, DType::BF16, Device::CUDA);
  const Tensor gpu_x = x.to(DType::BF16).to(Device::CUDA);
  const std::vector<Tensor> batched = ops::linear_each(gpu_x, stacked, out);
  const std::vector<Tensor> one_by_one = ops::linear_each(gpu_x, separate, out);
  bool stacked_storage = true;
  for (int64_t i = 1; i < count; ++i)
    stacked_storage =
        stacked_storage && stacked[size_t(i)].raw() == stacked[0].raw() + i * stacked[0].nbytes();
  double worst = 0, against_separate = 0;
  bool shapes = int64_t(batched.size()) == count && stacked_storage;
  for (int64_t i = 0; i < count; ++i) {
    const Tensor expected = ops::linear(x, weights[size_t(i)]);
    const Agreement agreement =
        compare(batched[size_t(i)], expected, out == DType::BF16 ? 1.0 / 256 : 1e-5, 1e-3);
    shapes = shapes && batched[size_t(i)].shape() == expected.shape() &&
             batched[size_t(i)].dtype() == out;
    worst = std::max(worst, agreement.worst);
    against_separate =
        std::max(against_separate,
                 compare(batched[size_t(i)], one_by_one[size_t(i)].to(Device::CPU).to(DType::F32),
                         out == DType::BF16 ? 1.0 / 256 : 1e-5, 1e-3)
                     .worst);
  }
  expect(shapes && worst <= 1.0 && against_separate <= 1.0,
         fmt::format("linear_each: {} stacked [{}, {}] weights on [{}, {}] → {} as one batched "
                     "product: within the CPU's by {:.2f} of the bound, of one product each by "
                     "{:.2f}",
                     count, features, in, rows, in, dtype_name(out), worst, against_separate));
}

void report_timings() {
  const int64_t tokens = 4160, heads = 30, head_dim = 128, ffn = 10240;
  const int64_t rows = tokens * heads;
  Tensor q = ops::random_uniform({rows, head_dim}, DType::BF16, Device::CUDA, 1, 2.0f);
  const Tensor weight = Tensor::full({head_dim}, 1.0f).to(Device::CUDA);
  const Tensor cos = ops::random_uniform({rows, head_dim / 2}, DType::F32, Device::CUDA, 2, 1.0f);
  const Tensor sin = ops::random_uniform({rows, head_dim / 2}, DType::F32, Device::CUDA, 3, 1.0f);
  const double norm_ms =
      milliseconds_per_call([&] { ops::rms_norm_rope_(q, weight, 1e-5f, cos, sin, head_dim); });
  // Read and write the rows, read both tables.
  const double norm_bytes = 2.0 * double(q.nbytes()) + 2.0 * double(cos.nbytes());
  std::printf("rms_norm_rope [%lld, %lld] bf16 with tables: %.3f ms, %.0f GB/s effective\n",
              static_cast<long long>(rows), static_cast<long long>(head_dim), norm_ms,
              norm_bytes / (norm_ms * 1e-3) / 1e9);

  const Tensor gate = ops::random_uniform({tokens, ffn}, DType::BF16, Device::CUDA, 4, 3.0f);
  const Tensor up = ops::random_uniform({tokens, ffn}, DType::BF16, Device::CUDA, 5, 3.0f);
  const double fused_ms = milliseconds_per_call([&] { ops::silu_mul(gate, up, DType::BF16); });
  std::printf("silu_mul [%lld, %lld] bf16 · bf16 → bf16: %.3f ms, %.0f GB/s effective\n",
              static_cast<long long>(tokens), static_cast<long long>(ffn), fused_ms,
              3.0 * double(gate.nbytes()) / (fused_ms * 1e-3) / 1e9);
  // q/k/v and w1/w3 at Turbo's sizes: one batched product of stacked weights against one
  // product per weight (each already tuned by its first call, outside the timing).
  const int64_t dim = 3840;
  const Tensor x = ops::random_uniform({tokens, dim}, DType::BF16, Device::CUDA, 6, 1.0f);
  for (const auto& [count, features] : {std::pair<int64_t, int64_t>{3, dim}, {2, ffn}}) {
    const Tensor all =
        ops::random_uniform({count, features, dim}, DType::BF16, Device::CUDA, 7, 0.02f);
    std::vector<Tensor> stacked, separate;
    for (int64_t i = 0; i < count; ++i) {
      stacked.push_back(all.select(0, i));
      separate.push_back(
          ops::random_uniform({features, dim}, DType::BF16, Device::CUDA, uint64_t(8 + i), 0.02f));
    }
    const double batched_ms =
        milliseconds_per_call([&] { ops::linear_each(x, stacked, DType::BF16); });
    const double separate_ms =
        milliseconds_per_call([&] { ops::linear_each(x, separate, DType::BF16); });
    const double flop = 2.0 * double(count * tokens * features * dim);
    std::printf(
        "%lld x [%lld, %lld] · [%lld, %lld]ᵀ → bf16: batched %.3f ms (%.0f TFLOP/s), one "
        "product each %.3f ms (%.0f TFLOP/s)\n",
        static_cast<long long>(count), static_cast<long long>(tokens), static_cast<long long>(dim),
        static_cast<long long>(features), static_cast<long long>(dim), batched_ms,
        flop / (batched_ms * 1e-3) / 1e12, separate_ms, flop / (separate_ms * 1e-3) / 1e12);
  }
  const Tensor gate_f32 = gate.to(DType::F32), up_f32 = up.to(DType::F32);
  const double f32_ms =
      milliseconds_per_call([&] { ops::silu_mul(gate_f32, up_f32, DType::BF16); });
  std::printf("silu_mul [%lld, %lld] f32 · f32 → bf16: %.3f ms\n", static_cast<long long>(tokens),
              static_cast<long long>(ffn), f32_ms);
  const double separate_ms = milliseconds_per_call([&] {
    Tensor hidden = gate_f32.clone();
    ops::silu_(hidden);
    ops::mul_(hidden, up_f32);
    hidden.to(DType::BF16);
  });
  std::printf("  the separate f32 clone + silu_ + mul_ + .to(bf16) it replaces: %.3f ms\n",
              separate_ms);
}

}  // namespace

int main() try {
  std::mt19937 generator(20261125);
  // The warp-per-row kernel: each register-slot count (≤ 64, 128, 256, 512 wide), rows not a
  // multiple of the 8 a block holds.
  for (const int64_t dim : {16, 64, 128}) {
    const int64_t rows = 3 * 37;
    check_rms_norm_rope(rows, dim, dim, 0, generator);
    check_rms_norm_rope(rows, dim, dim, rows, generator);
    check_rms_norm_rope(rows, dim, dim, 37, generator);
  }
  check_rms_norm_rope(4160 * 3 + 5, 128, 128, 4160 * 3 + 5, generator);  // many blocks
  check_rms_norm_rope(45, 320, 64, 9, generator);                        // several heads per row
  // Z-Image: q viewed one row per head, the tables one row per token.
  check_rms_norm_rope(4160 * 30, 128, 128, 4160, generator, 30);
  check_rms_norm_rope(45, 64, 64, 7, generator, 3);
  check_rms_norm_rope(13, 512, 128, 0, generator);  // the widest warp rows
  check_rms_norm_rope(13, 512, 128, 13, generator);
  // The block-per-row kernel.
  for (const DType y_dtype : {DType::BF16, DType::F32})
    for (const bool gated : {true, false}) {
      check_add_rms_norm_gated_norm(37, 3840, y_dtype, gated, generator);
      check_add_rms_norm_gated_norm(5, 100, y_dtype, gated, generator);
    }
  // Wide rows (Wan's hidden width across heads): the one-pass kernel at 1 and 3 warps per row, and
  // a width it does not take (head size not a multiple of 8: the block-per-row kernel).
  check_rms_norm_rope(21, 1536, 128, 0, generator);
  check_rms_norm_rope(21, 1536, 128, 7, generator);
  check_rms_norm_rope(130, 1536, 128, 65, generator, 2);
  check_rms_norm_rope(9, 5120, 128, 9, generator);
  check_rms_norm_rope(9, 1540, 140, 4, generator);
  for (const DType y_dtype : {DType::BF16, DType::F32})
    for (const bool gated : {true, false})
      for (const int64_t dim : {1536, 5120, 96, 100, 10, 13000})
        check_add_gated_layer_norm(dim > 5000 ? 5 : 37, dim, y_dtype, gated, generator);

  // FP8 products' inputs from the norms (the one-pass kernel, and widths it hands on), and the
  // products themselves.
  for (const bool update : {true, false})
    for (const int64_t dim : {1536, 5120, 96, 100, 13000})
      check_fp8_norm(dim > 5000 ? 5 : 37, dim, update, generator);
  for (const bool gelu : {false, true}) {
    check_fp8_linear(77, 192, 256, DType::BF16, gelu, generator);
    check_fp8_linear(300, 1536, 8960, DType::BF16, gelu, generator);
  }
  const std::string fp8_f32 = error_message([] {
    const Tensor w = Tensor::zeros({32, 64}, DType::BF16, Device::CUDA).to(DType::F8E4M3Rows);
    ops::linear(Tensor::zeros({4, 64}, DType::BF16, Device::CUDA), w, Tensor(), DType::F32);
  });
  expect(fp8_f32.find("FP8 product writes bf16") != std::string::npos,
         "an FP8 product refuses a float32 result in one line: " + fp8_f32);

  for (const DType gate : {DType::BF16, DType::F32})
    for (const DType up : {DType::BF16, DType::F32})
      for (const DType out : {DType::BF16, DType::F32}) {
        check_silu_mul({3, 1001}, gate, up, out, 0, generator);  // 3003: a 3-value tail
        check_silu_mul({7}, gate, up, out, 0, generator);        // shorter than one group
        check_silu_mul({5, 64}, gate, up, out, 0, generator);    // whole groups only
        check_silu_mul({2, 515}, gate, up, out, 1, generator);   // unaligned: all scalar
      }
  for (const DType out : {DType::BF16, DType::F32}) {
    check_linear_each(77, 192, 256, 3, out, generator);
    check_linear_each(300, 320, 128, 2, out, generator);
  }
  check_fold_scale_gate(34, 2, 3840, generator);
  check_fold_scale_gate(3, 1, 7, generator);
  const std::string unpaired = error_message([] {
    ops::fold_scale_gate(Tensor::zeros({2, 3, 8}, DType::F32, Device::CUDA),
                         Tensor::zeros({2, 1, 8}, DType::F32, Device::CUDA));
  });
  expect(unpaired.find("fold_scale_gate") != std::string::npos,
         "fold_scale_gate refuses rows that are not pairs over the norms: " + unpaired);
  const std::string different = error_message([] {
    ops::silu_mul(Tensor::zeros({4, 8}, DType::BF16, Device::CUDA),
                  Tensor::zeros({8, 4}, DType::BF16, Device::CUDA), DType::BF16);
  });
  expect(different.find("silu_mul") != std::string::npos,
         "silu_mul refuses different shapes: " + different);
  const std::string odd = error_message([] {
    Tensor rows = Tensor::zeros({4, 7}, DType::BF16, Device::CUDA);
    ops::rms_norm_rope_(rows, Tensor::full({7}, 1.0f).to(Device::CUDA), 1e-5f);
  });
  expect(odd.find("even") != std::string::npos, "rms_norm_rope refuses odd rows: " + odd);

  report_timings();
  return finish("zimage_block_ops_cuda_test");
} catch (const std::exception& error) {
  std::printf("zimage_block_ops_cuda_test: error: %s\n", error.what());
  return 1;
}
