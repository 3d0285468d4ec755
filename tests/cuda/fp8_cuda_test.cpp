// FP8 (e4m3) operands and products on Hopper (core/cuda/fp8.h, linear_fp8 in core/cuda/gemm.h):
// - quantize_e4m3 of bf16 and float32 tensors (an odd count, an outlier that sets the scale, an
//   all-zero tensor): the scale is max|x| / 448 exactly, and every value comes back within e4m3's
//   rounding (half a unit of its 3-bit mantissa, or of the smallest subnormal, times the scale);
// - linear_fp8 with the bias and the GELU epilogues against a float64 host product of the
//   dequantized operands (what the tensor cores multiply): within the bf16 output's rounding; and
//   its distance from the unquantized product, which is what a user of an FP8 mode gives up;
// - quantize_e4m3_rows (one scale per row, rows read with a stride): every scale and byte equal to
//   the host's e4m3 rounding of x / (max|row| / 448);
// - linear_fp8 with per-row scales (cuBLASLt's outer-vector scaling: per token and per output
//   channel) against the same float64 product of its dequantized operands;
// - a width the e4m3 product cannot take is refused in one line.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "core/cuda/device_memory.h"
#include "core/cuda/fp8.h"
#include "core/cuda/gemm.h"
#include "cuda_test_support.h"

using namespace mmgen;
using namespace mmgen::cuda;
using namespace mmgen::cuda_testing;

namespace {

// Quantizes `values` (as bf16 bits when `bf16`, else as float32) on the GPU; returns the scale and
// the dequantized values.
std::pair<float, std::vector<float>> round_trip(const std::vector<float>& values, bool bf16) {
  const int64_t count = int64_t(values.size());
  DeviceBuffer input(values.size() * 4), quantized(values.size() + 1), scale(4), amax(4),
      back(values.size() * 4);
  if (bf16) {
    std::vector<uint16_t> bits(values.size());
    for (size_t i = 0; i < values.size(); ++i) bits[i] = f32_to_bf16(values[i]);
    input.upload(bits.data(), bits.size() * 2);
  } else {
    input.upload(values.data(), values.size() * 4);
  }
  quantize_e4m3(input.data(), bf16, count, quantized.data(), scale.as<float>(), amax.as<float>());
  dequantize_e4m3(quantized.data(), scale.as<float>(), count, back.as<float>());
  std::vector<float> result(values.size());
  float s = 0;
  back.download(result.data(), result.size() * 4);
  scale.download(&s, 4);
  return {s, result};
}

void check_quantize(std::vector<float> values, bool bf16, const std::string& what) {
  if (bf16)  // what the GPU reads
    for (float& v : values) v = bf16_to_f32(f32_to_bf16(v));
  float amax = 0;
  for (float v : values) amax = std::max(amax, std::abs(v));
  const float expected_scale = amax > 0 ? amax / kE4m3Max : 1.0f;
  const auto [scale, back] = round_trip(values, bf16);
  double worst = 0;
  for (size_t i = 0; i < values.size(); ++i) {
    const double x = values[i];
    const double bound = (std::ldexp(std::abs(x), -4) + std::ldexp(double(scale), -10)) * 1.0001;
    worst = std::max(worst, std::abs(back[i] - x) / bound);
  }
  expect(scale == expected_scale && worst <= 1.0,
         fmt::format("quantize_e4m3 {} ({} {} values): scale {:.6g} (max|x| / 448 = {:.6g}), "
                     "every value within e4m3's rounding (worst {:.2f} of it)",
                     what, values.size(), bf16 ? "bf16" : "float32", scale, expected_scale, worst));
}

double gelu_tanh(double v) {
  return 0.5 * v * (1.0 + std::tanh(0.7978845608028654 * (v + 0.044715 * v * v * v)));
}

}  // namespace

int main() try {
  std::mt19937 generator(11);
  std::normal_distribution<float> normal;

  // Quantization.
  std::vector<float> values(3003);
  for (float& v : values) v = 3.0f * normal(generator);
  values[1234] = -100.0f;  // the outlier sets the scale; small values go subnormal
  check_quantize(values, true, "with an outlier");
  check_quantize(values, false, "with an outlier");
  check_quantize(std::vector<float>(17, 0.0f), true, "all zeros");
  std::vector<float> tiny(64);
  for (float& v : tiny) v = 1e-3f * normal(generator);
  check_quantize(tiny, false, "small values");

  // Products: x [m, k] · w [n, k]ᵀ + bias, bf16 output.
  const int64_t m = 96, n = 320, k = 256;
  std::vector<float> x(static_cast<size_t>(m * k)), w(static_cast<size_t>(n * k)),
      bias(static_cast<size_t>(n));
  for (float& v : x) v = bf16_to_f32(f32_to_bf16(normal(generator)));
  for (float& v : w) v = bf16_to_f32(f32_to_bf16(0.1f * normal(generator)));
  for (float& v : bias) v = bf16_to_f32(f32_to_bf16(0.5f * normal(generator)));
  std::vector<uint16_t> x_bits(x.size()), w_bits(w.size()), bias_bits(bias.size());
  for (size_t i = 0; i < x.size(); ++i) x_bits[i] = f32_to_bf16(x[i]);
  for (size_t i = 0; i < w.size(); ++i) w_bits[i] = f32_to_bf16(w[i]);
  for (size_t i = 0; i < bias.size(); ++i) bias_bits[i] = f32_to_bf16(bias[i]);
  DeviceBuffer x_gpu(x.size() * 2), w_gpu(w.size() * 2), bias_gpu(bias.size() * 2);
  x_gpu.upload(x_bits.data(), x_bits.size() * 2);
  w_gpu.upload(w_bits.data(), w_bits.size() * 2);
  bias_gpu.upload(bias_bits.data(), bias_bits.size() * 2);
  DeviceBuffer x8(x.size()), w8(w.size()), scales(32), amax(4), x_back(x.size() * 4),
      w_back(w.size() * 4), y(size_t(m * n) * 2);
  float* x_scale = scales.as<float>();
  float* w_scale = scales.as<float>() + 4;  // scales 16-byte aligned, as cuBLASLt wants them
  quantize_e4m3(x_gpu.data(), true, int64_t(x.size()), x8.data(), x_scale, amax.as<float>());
  quantize_e4m3(w_gpu.data(), true, int64_t(w.size()), w8.data(), w_scale, amax.as<float>());
  dequantize_e4m3(x8.data(), x_scale, int64_t(x.size()), x_back.as<float>());
  dequantize_e4m3(w8.data(), w_scale, int64_t(w.size()), w_back.as<float>());
  std::vector<float> xq(x.size()), wq(w.size());
  x_back.download(xq.data(), xq.size() * 4);
  w_back.download(wq.data(), wq.size() * 4);
  // No epilogue, the bias, the bias and GELU: each on its own, so one unsupported form does not
  // hide the others.
  for (const int form : {0, 1, 2}) {
    const bool with_bias = form > 0, gelu = form == 2;
    const char* epilogue = form == 0 ? "no" : gelu ? "bias + GELU (tanh)" : "bias";
    const std::string failed = error_message([&] {
      linear_fp8(x8.data(), x_scale, w8.data(), w_scale, with_bias ? bias_gpu.data() : nullptr,
                 y.data(), m, n, k, GemmOutput::BF16, nullptr,
                 gelu ? GemmActivation::GeluTanh : GemmActivation::None);
    });
    if (!failed.empty()) {
      expect(false, fmt::format("linear_fp8, {} epilogue: {}", epilogue, failed));
      continue;
    }
    std::vector<uint16_t> y_bits(size_t(m * n));
    y.download(y_bits.data(), y_bits.size() * 2);
    std::vector<double> actual(y_bits.size()), quantized(y_bits.size()), exact(y_bits.size());
    for (int64_t r = 0; r < m; ++r)
      for (int64_t c = 0; c < n; ++c) {
        double dot_q = with_bias ? bias[size_t(c)] : 0.0, dot = dot_q;
        for (int64_t i = 0; i < k; ++i) {
          dot_q += double(xq[size_t(r * k + i)]) * wq[size_t(c * k + i)];
          dot += double(x[size_t(r * k + i)]) * w[size_t(c * k + i)];
        }
        const size_t at = size_t(r * n + c);
        quantized[at] = gelu ? gelu_tanh(dot_q) : dot_q;
        exact[at] = gelu ? gelu_tanh(dot) : dot;
        actual[at] = bf16_to_f32(y_bits[at]);
      }
    const double to_quantized = relative_error(actual, quantized);
    const double to_exact = relative_error(actual, exact);
    expect(to_quantized < 4e-3,
           fmt::format("linear_fp8 {}x{}x{}, {} epilogue: {:.2e} from the product of the "
                       "dequantized operands (< 4e-3, the bf16 output's rounding)",
                       m, n, k, epilogue, to_quantized));
    expect(to_exact < 0.08,
           fmt::format("linear_fp8 {}x{}x{}, {} epilogue: {:.2e} from the unquantized bf16 "
                       "operands' product (e4m3's rounding; < 0.08)",
                       m, n, k, epilogue, to_exact));
  }
  // Per-row scales: x as the first k of rows k + 16 apart (a strided view), w contiguous.
  {
    const int64_t stride = k + 16;
    std::vector<uint16_t> x_wide(size_t(m * stride), 0);
    for (int64_t r = 0; r < m; ++r)
      for (int64_t i = 0; i < k; ++i) x_wide[size_t(r * stride + i)] = x_bits[size_t(r * k + i)];
    DeviceBuffer x_wide_gpu(x_wide.size() * 2), x_row_scales(size_t(m) * 4),
        w_row_scales(size_t(n) * 4);
    x_wide_gpu.upload(x_wide.data(), x_wide.size() * 2);
    x8.fill_bytes(0xff), w8.fill_bytes(0xff);
    quantize_e4m3_rows(x_wide_gpu.data(), m, k, stride, x8.data(), x_row_scales.as<float>());
    quantize_e4m3_rows(w_gpu.data(), n, k, k, w8.data(), w_row_scales.as<float>());
    // The host's rounding of the same rows: scales, bytes, and the values they stand for.
    auto host_rows = [&](const std::vector<float>& a, int64_t rows, DeviceBuffer& bytes_gpu,
                         DeviceBuffer& scales_gpu, const char* what) {
      std::vector<uint8_t> bytes(size_t(rows * k));
      std::vector<float> scales_got(static_cast<size_t>(rows)), values(bytes.size());
      bytes_gpu.download(bytes.data(), bytes.size());
      scales_gpu.download(scales_got.data(), scales_got.size() * 4);
      int64_t wrong = 0, wrong_scales = 0;
      for (int64_t r = 0; r < rows; ++r) {
        float amax = 0;
        for (int64_t i = 0; i < k; ++i) amax = std::max(amax, std::abs(a[size_t(r * k + i)]));
        const float s = amax > 0 ? amax / kE4m3Max : 1.0f;
        wrong_scales += scales_got[size_t(r)] != s;
        for (int64_t i = 0; i < k; ++i) {
          const size_t at = size_t(r * k + i);
          wrong += bytes[at] != f32_to_e4m3(a[at] / s);
          values[at] = e4m3_to_f32(bytes[at]) * scales_got[size_t(r)];
        }
      }
      expect(wrong == 0 && wrong_scales == 0,
             fmt::format("quantize_e4m3_rows {} ({} rows of {}): {} bytes and {} scales differ "
                         "from the host's rounding",
                         what, rows, k, wrong, wrong_scales));
      return values;
    };
    const std::vector<float> xr = host_rows(x, m, x8, x_row_scales, "x, strided");
    const std::vector<float> wr = host_rows(w, n, w8, w_row_scales, "w");
    for (const int form : {0, 2}) {
      const bool gelu = form == 2;
      const char* epilogue = gelu ? "bias + GELU (tanh)" : "no";
      const std::string failed = error_message([&] {
        linear_fp8(x8.data(), x_row_scales.as<float>(), w8.data(), w_row_scales.as<float>(),
                   gelu ? bias_gpu.data() : nullptr, y.data(), m, n, k, GemmOutput::BF16, nullptr,
                   gelu ? GemmActivation::GeluTanh : GemmActivation::None, Fp8Scales::PerRow);
      });
      if (!failed.empty()) {
        expect(false, fmt::format("linear_fp8 per-row scales, {} epilogue: {}", epilogue, failed));
        continue;
      }
      std::vector<uint16_t> y_bits(size_t(m * n));
      y.download(y_bits.data(), y_bits.size() * 2);
      std::vector<double> actual(y_bits.size()), quantized(y_bits.size()), exact(y_bits.size());
      for (int64_t r = 0; r < m; ++r)
        for (int64_t c = 0; c < n; ++c) {
          double dot_q = gelu ? bias[size_t(c)] : 0.0, dot = dot_q;
          for (int64_t i = 0; i < k; ++i) {
            dot_q += double(xr[size_t(r * k + i)]) * wr[size_t(c * k + i)];
            dot += double(x[size_t(r * k + i)]) * w[size_t(c * k + i)];
          }
          const size_t at = size_t(r * n + c);
          quantized[at] = gelu ? gelu_tanh(dot_q) : dot_q;
          exact[at] = gelu ? gelu_tanh(dot) : dot;
          actual[at] = bf16_to_f32(y_bits[at]);
        }
      const double to_quantized = relative_error(actual, quantized);
      expect(to_quantized < 4e-3,
             fmt::format("linear_fp8 per-row scales {}x{}x{}, {} epilogue: {:.2e} from the "
                         "product of the dequantized operands (< 4e-3); {:.2e} from the "
                         "unquantized operands' product",
                         m, n, k, epilogue, to_quantized, relative_error(actual, exact)));
    }
  }

  const std::string refused = error_message([&] {
    linear_fp8(x8.data(), x_scale, w8.data(), w_scale, nullptr, y.data(), 8, 16, 24,
               GemmOutput::BF16);
  });
  expect(refused.find("multiples of 16") != std::string::npos,
         "linear_fp8 refuses 24 inputs in one line: " + refused);
  return finish("fp8_cuda_test");
} catch (const std::exception& error) {
  std::printf("fp8_cuda_test: error: %s\n", error.what());
  return 1;
}
