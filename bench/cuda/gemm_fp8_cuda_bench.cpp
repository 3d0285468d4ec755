// The Wan2.1-1.3B-sized transformer's products (32760 tokens, width 1536, feed-forward 8960) in
// bf16 and in FP8 (e4m3, per-tensor scales, and per-row ones: per token and per output channel,
// core/cuda/fp8.h): milliseconds per product (median of
// repeats, cuBLASLt's tuned algorithm), TFLOP/s, the cost of quantizing the product's input, and
// the FP8 result's relative distance from the bf16 one on random inputs (N(0, 1) activations,
// N(0, 0.02²) weights). The weights would be quantized once when loaded; the activations every
// call.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "core/cuda/cuda_check.h"
#include "core/cuda/device_memory.h"
#include "core/cuda/fp8.h"
#include "core/cuda/gemm.h"
#include "core/dtype.h"
#include "event_timing.h"

using namespace mmgen;
using namespace mmgen::cuda;

namespace {

std::vector<uint16_t> random_bf16_bits(size_t count, float sigma, uint32_t seed) {
  std::mt19937 generator(seed);
  std::normal_distribution<float> normal(0.0f, sigma);
  std::vector<uint16_t> bits(count);
  for (auto& b : bits) b = f32_to_bf16(normal(generator));
  return bits;
}

}  // namespace

int main(int argc, char** argv) try {
  int repeats = 20;
  if (argc == 3 && std::string(argv[1]) == "--repeats") repeats = std::stoi(argv[2]);
  struct Shape {
    const char* name;
    int64_t m, n, k;
    bool gelu;
  };
  const Shape shapes[] = {{"q/k/v/out projection", 32760, 1536, 1536, false},
                          {"feed-forward in (GELU)", 32760, 8960, 1536, true},
                          {"feed-forward out", 32760, 1536, 8960, false}};
  std::printf("%-34s %8s %9s %9s %11s %9s %9s %10s\n", "product (FP8 scales)", "bf16 ms", "TFLOP/s",
              "fp8 ms", "TFLOP/s", "quant ms", "speedup", "rel. diff");
  for (const Shape& s : shapes) {
    const size_t x_count = size_t(s.m * s.k), w_count = size_t(s.n * s.k);
    DeviceBuffer x(x_count * 2), w(w_count * 2), bias(size_t(s.n) * 2), y16(size_t(s.m * s.n) * 2),
        y8(size_t(s.m * s.n) * 2), x8(x_count), w8(w_count), scales(32), amax(4),
        x_rows(size_t(s.m) * 4), w_rows(size_t(s.n) * 4), w8_rows(w_count);
    x.upload(random_bf16_bits(x_count, 1.0f, 1).data(), x_count * 2);
    w.upload(random_bf16_bits(w_count, 0.02f, 2).data(), w_count * 2);
    bias.upload(random_bf16_bits(size_t(s.n), 0.1f, 3).data(), size_t(s.n) * 2);
    float* x_scale = scales.as<float>();
    float* w_scale = scales.as<float>() + 4;  // scales 16-byte aligned, as cuBLASLt wants them
    quantize_e4m3(w.data(), true, int64_t(w_count), w8.data(), w_scale, amax.as<float>());
    quantize_e4m3_rows(w.data(), s.n, s.k, s.k, w8_rows.data(), w_rows.as<float>());
    const GemmActivation activation = s.gelu ? GemmActivation::GeluTanh : GemmActivation::None;
    const double bf16_ms = bench::median_event_ms(
        [&] {
          linear_bf16(x.data(), w.data(), bias.data(), y16.data(), s.m, s.n, s.k, GemmOutput::BF16,
                      nullptr, activation);
        },
        repeats);
    const double flops = 2.0 * double(s.m) * double(s.n) * double(s.k);
    for (const Fp8Scales mode : {Fp8Scales::PerTensor, Fp8Scales::PerRow}) {
      const bool rows = mode == Fp8Scales::PerRow;
      const std::string label = std::string(s.name) + (rows ? " (rows)" : " (tensor)");
      float* xs = rows ? x_rows.as<float>() : x_scale;
      float* ws = rows ? w_rows.as<float>() : w_scale;
      const void* w_q = rows ? w8_rows.data() : w8.data();
      const double quant_ms = bench::median_event_ms(
          [&] {
            if (rows)
              quantize_e4m3_rows(x.data(), s.m, s.k, s.k, x8.data(), xs);
            else
              quantize_e4m3(x.data(), true, int64_t(x_count), x8.data(), xs, amax.as<float>());
          },
          repeats);
      double fp8_ms = 0;
      try {
        fp8_ms = bench::median_event_ms(
            [&] {
              linear_fp8(x8.data(), xs, w_q, ws, bias.data(), y8.data(), s.m, s.n, s.k,
                         GemmOutput::BF16, nullptr, activation, mode);
            },
            repeats);
      } catch (const std::exception& error) {
        std::printf("%-34s %8.3f %9.1f  FP8: %s\n", label.c_str(), bf16_ms, flops / bf16_ms * 1e-9,
                    error.what());
        continue;
      }
      std::vector<uint16_t> a(size_t(s.m * s.n)), b(a.size());
      y8.download(a.data(), a.size() * 2);
      y16.download(b.data(), b.size() * 2);
      double difference = 0, norm = 0;
      for (size_t i = 0; i < a.size(); ++i) {
        const double u = bf16_to_f32(a[i]), v = bf16_to_f32(b[i]);
        difference += (u - v) * (u - v);
        norm += v * v;
      }
      std::printf("%-34s %8.3f %9.1f %9.3f %11.1f %9.3f %8.2fx %10.2e\n", label.c_str(), bf16_ms,
                  flops / bf16_ms * 1e-9, fp8_ms, flops / fp8_ms * 1e-9, quant_ms,
                  bf16_ms / (fp8_ms + quant_ms), std::sqrt(difference / norm));
    }
  }
  return 0;
} catch (const std::exception& error) {
  std::fprintf(stderr, "gemm_fp8_cuda_bench: %s\n", error.what());
  return 1;
}
