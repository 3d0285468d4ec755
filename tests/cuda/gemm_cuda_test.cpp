// cuBLASLt products against a float64 host reference from the same bf16 inputs: bias epilogue
// with bf16 and fp32 outputs, and the GELU epilogue, which must be the tanh form Wan's
// feed-forward uses (with fp32 output the tanh and erf forms differ by up to ~5e-4, far above the
// product's rounding, so the check tells them apart). Then matmul_bf16 on strided and transposed
// views of the same inputs.
#include <cmath>
#include <random>
#include <vector>

#include "core/cuda/cuda_check.h"
#include "core/cuda/device_memory.h"
#include "core/cuda/gemm.h"
#include "cuda_test_support.h"

using namespace mmgen;
using namespace mmgen::cuda;
using namespace mmgen::cuda_testing;

int main() try {
  std::mt19937 generator(7);
  const int64_t m = 96, n = 320, k = 256;
  const Bf16Values x = random_bf16(size_t(m * k), generator);
  Bf16Values w = random_bf16(size_t(n * k), generator);
  for (auto& value : w.values) value *= 0.1f;  // keep outputs in GELU's curved range
  for (size_t i = 0; i < w.bits.size(); ++i) w.bits[i] = f32_to_bf16(w.values[i]);
  for (size_t i = 0; i < w.bits.size(); ++i) w.values[i] = bf16_to_f32(w.bits[i]);
  std::vector<float> bias(static_cast<size_t>(n));
  std::normal_distribution<float> normal;
  for (auto& b : bias) b = 0.5f * normal(generator);
  std::vector<uint16_t> bias_bf16(bias.size());
  for (size_t i = 0; i < bias.size(); ++i) {
    bias_bf16[i] = f32_to_bf16(bias[i]);
  }

  std::vector<double> pre(size_t(m * n)), pre_bf16_bias(size_t(m * n));
  for (int64_t r = 0; r < m; ++r)
    for (int64_t c = 0; c < n; ++c) {
      double dot = 0;
      for (int64_t i = 0; i < k; ++i)
        dot += double(x.values[size_t(r * k + i)]) * w.values[size_t(c * k + i)];
      pre[size_t(r * n + c)] = dot + bias[size_t(c)];
      pre_bf16_bias[size_t(r * n + c)] = dot + bf16_to_f32(bias_bf16[size_t(c)]);
    }
  auto gelu_tanh = [](double v) {
    return 0.5 * v * (1.0 + std::tanh(0.7978845608028654 * (v + 0.044715 * v * v * v)));
  };
  auto gelu_erf = [](double v) { return 0.5 * v * (1.0 + std::erf(v / std::sqrt(2.0))); };

  DeviceBuffer dx(x.bits.size() * 2), dw(w.bits.size() * 2), db(bias.size() * 4),
      db16(bias_bf16.size() * 2), dy32(size_t(m * n) * 4), dy16(size_t(m * n) * 2);
  dx.upload(x.bits.data(), x.bits.size() * 2);
  dw.upload(w.bits.data(), w.bits.size() * 2);
  db.upload(bias.data(), bias.size() * 4);
  db16.upload(bias_bf16.data(), bias_bf16.size() * 2);
  std::vector<float> y32(size_t(m * n));
  std::vector<uint16_t> y16(size_t(m * n));

  auto max_error = [&](const std::vector<double>& expected, auto actual_at) {
    double worst = 0;
    for (size_t i = 0; i < expected.size(); ++i)
      worst = std::max(worst, std::abs(actual_at(i) - expected[i]));
    return worst;
  };
  auto apply = [](const std::vector<double>& values, auto function) {
    std::vector<double> out(values.size());
    for (size_t i = 0; i < values.size(); ++i) out[i] = function(values[i]);
    return out;
  };

  dy32.fill_bytes(0xff);
  linear_bf16(dx.data(), dw.data(), db.data(), dy32.data(), m, n, k, GemmOutput::F32);
  MMGEN_CUDA_CHECK(cudaDeviceSynchronize());
  dy32.download(y32.data(), y32.size() * 4);
  const double bias_error = max_error(pre, [&](size_t i) { return double(y32[i]); });
  expect(bias_error < 1e-4, fmt::format("fp32 output with bias: max abs error {:.2e}", bias_error));

  dy16.fill_bytes(0xff);
  linear_bf16(dx.data(), dw.data(), db16.data(), dy16.data(), m, n, k, GemmOutput::BF16);
  MMGEN_CUDA_CHECK(cudaDeviceSynchronize());
  dy16.download(y16.data(), y16.size() * 2);
  double worst_relative = 0;
  for (size_t i = 0; i < y16.size(); ++i)
    worst_relative = std::max(worst_relative, std::abs(bf16_to_f32(y16[i]) - pre_bf16_bias[i]) /
                                                  std::max(1e-2, std::abs(pre_bf16_bias[i])));
  expect(worst_relative < 8e-3,
         fmt::format("bf16 output with bias: max error {:.2e} of the value (bf16 rounding 3.9e-3)",
                     worst_relative));

  dy32.fill_bytes(0xff);
  linear_bf16(dx.data(), dw.data(), db.data(), dy32.data(), m, n, k, GemmOutput::F32, nullptr,
              GemmActivation::GeluTanh);
  MMGEN_CUDA_CHECK(cudaDeviceSynchronize());
  dy32.download(y32.data(), y32.size() * 4);
  const double tanh_error =
      max_error(apply(pre, gelu_tanh), [&](size_t i) { return double(y32[i]); });
  const double erf_error =
      max_error(apply(pre, gelu_erf), [&](size_t i) { return double(y32[i]); });
  expect(tanh_error < 5e-5 && erf_error > 4 * tanh_error,
         fmt::format("GELU epilogue is the tanh form: max abs error {:.2e} vs tanh GELU, {:.2e} "
                     "vs erf GELU",
                     tanh_error, erf_error));

  // matmul_bf16 on strided views, the way SLA's linear branch reads one head of a [tokens,
  // heads·D] activation in place: two heads of 128 columns of x (row stride k = 256).
  const int64_t head = 128, heads = 2;
  auto x_at = [&](int64_t r, int64_t c) { return double(x.values[size_t(r * k + c)]); };
  auto w_at = [&](int64_t r, int64_t c) { return double(w.values[size_t(r * k + c)]); };
  // a[h] = x[:, head h]ᵀ (128 x 96, stored transposed), b[h] = w[0:96, head h] (96 x 128):
  // y[h] = x_hᵀ · w_h, 128 x 128 contiguous per head.
  std::vector<float> ya(size_t(heads * head * head));
  DeviceBuffer dya(ya.size() * 4);
  dya.fill_bytes(0xff);
  matmul_bf16(MatrixOperand{dx.data(), k, head, true}, MatrixOperand{dw.data(), k, head},
              dya.data(), head, head * head, head, head, m, heads, GemmOutput::F32);
  MMGEN_CUDA_CHECK(cudaDeviceSynchronize());
  dya.download(ya.data(), ya.size() * 4);
  double transposed_error = 0;
  for (int64_t h = 0; h < heads; ++h)
    for (int64_t i = 0; i < head; ++i)
      for (int64_t j = 0; j < head; ++j) {
        double dot = 0;
        for (int64_t t = 0; t < m; ++t) dot += x_at(t, h * head + i) * w_at(t, h * head + j);
        transposed_error = std::max(transposed_error,
                                    std::abs(double(ya[size_t((h * head + i) * head + j)]) - dot));
      }
  expect(transposed_error < 1e-4,
         fmt::format("strided product, left operand transposed: max abs error {:.2e}",
                     transposed_error));
  // a[h] = x[:, head h] (96 x 128), b[h] = w[160h : 160h + 160, head h]ᵀ (128 x 160, stored
  // transposed), y[h] into columns 160h .. of a 96 x 320 output (row stride 320).
  const int64_t outs = 160;
  std::vector<float> yb(size_t(m * heads * outs));
  DeviceBuffer dyb(yb.size() * 4);
  dyb.fill_bytes(0xff);
  matmul_bf16(MatrixOperand{dx.data(), k, head}, MatrixOperand{dw.data(), k, outs * k + head, true},
              dyb.data(), heads * outs, outs, m, outs, head, heads, GemmOutput::F32);
  MMGEN_CUDA_CHECK(cudaDeviceSynchronize());
  dyb.download(yb.data(), yb.size() * 4);
  double strided_error = 0;
  for (int64_t h = 0; h < heads; ++h)
    for (int64_t r = 0; r < m; ++r)
      for (int64_t c = 0; c < outs; ++c) {
        double dot = 0;
        for (int64_t i = 0; i < head; ++i)
          dot += x_at(r, h * head + i) * w_at(h * outs + c, h * head + i);
        strided_error = std::max(
            strided_error, std::abs(double(yb[size_t(r * heads * outs + h * outs + c)]) - dot));
      }
  expect(strided_error < 1e-4,
         fmt::format("strided product, right operand transposed, strided output: max abs error "
                     "{:.2e}",
                     strided_error));
  return finish("gemm_cuda_test");
} catch (const std::exception& error) {
  std::printf("gemm_cuda_test: error: %s\n", error.what());
  return 1;
}
