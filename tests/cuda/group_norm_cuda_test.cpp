// ops::group_norm on the GPU (core/cuda/group_norm.cu) against the same op on the CPU
// (core/group_norm.cpp, itself checked against torch in tests/group_norm_test.cpp) on random
// inputs: with and without the fused SiLU and the affine part, a 2-D input (one position), odd
// sizes (the scalar path), float4-sized planes, groups far from zero mean (the centred second
// pass), a VAE layer at 1024² (512 channels in 32 groups of 16 · 128² = 262144 values: 64 chunks
// per group) and a group past the chunk cap (4 · 1024² values in one group). Both compute in
// float32 with the same folded affine form, so they agree to float rounding: 1e-5 absolute on
// outputs of order 1–5. Then the refusals: a GPU input with a host weight, a CPU input with a GPU
// weight.
#include <cuda_runtime.h>
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>

#include "core/ops.h"
#include "core/tensor.h"
#include "cuda_test_support.h"
#include "models/dit/wan/wan_random_checkpoint.h"

using namespace mmgen;
using namespace mmgen::cuda_testing;

namespace {

double max_abs_difference(const Tensor& actual, const Tensor& expected) {
  const Tensor a = actual.to(Device::CPU);
  if (a.shape() != expected.shape()) return INFINITY;
  double largest = 0;
  for (int64_t i = 0; i < expected.numel(); ++i) {
    const double d = std::abs(double(a.data<float>()[i]) - double(expected.data<float>()[i]));
    if (!std::isfinite(d)) return INFINITY;
    largest = std::max(largest, d);
  }
  return largest;
}

struct Case {
  Shape shape;
  int64_t groups;
  float center;  // the inputs' mean: far from 0 tests the centred variance
};

void check_case(const Case& c, uint64_t seed) {
  const int64_t channels = c.shape[1];
  const Tensor x = dit::random_tensor(c.shape, c.center, 2.0f, seed, DType::F32);
  const Tensor weight = dit::random_tensor({channels}, 1.0f, 0.5f, seed + 1, DType::F32);
  const Tensor bias = dit::random_tensor({channels}, 0.0f, 0.5f, seed + 2, DType::F32);
  const Tensor gx = x.to(Device::CUDA), gw = weight.to(Device::CUDA), gb = bias.to(Device::CUDA);
  for (int affine = 0; affine < 2; ++affine)
    for (int silu = 0; silu < 2; ++silu) {
      const Tensor w = affine ? weight : Tensor(), b = affine ? bias : Tensor();
      const Tensor expected = ops::group_norm(x, c.groups, 1e-6f, w, b, silu == 1);
      const Tensor actual = ops::group_norm(gx, c.groups, 1e-6f, affine ? gw : Tensor(),
                                            affine ? gb : Tensor(), silu == 1);
      const double d = max_abs_difference(actual, expected);
      expect(actual.device() == Device::CUDA && d < 1e-5,
             fmt::format("group_norm {} in {} groups (mean {}){}{}: max |GPU - CPU| {:.2e} < 1e-5",
                         shape_string(c.shape), c.groups, c.center, affine ? ", affine" : "",
                         silu ? ", SiLU" : "", d));
    }
}

// The 1024² VAE layer's group norm with SiLU, timed: the kernels read the input three times and
// write it once, so the effective bandwidth is 4 · 32 MiB per call over the time.
void report_timing() {
  const Tensor x =
      dit::random_tensor({1, 512, 128, 128}, 0.0f, 2.0f, 3, DType::F32).to(Device::CUDA);
  const Tensor w = Tensor::full({512}, 1.0f).to(Device::CUDA);
  for (int i = 0; i < 3; ++i) ops::group_norm(x, 32, 1e-6f, w, w, true);  // warm-up
  cudaDeviceSynchronize();
  const int calls = 50;
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < calls; ++i) ops::group_norm(x, 32, 1e-6f, w, w, true);
  cudaDeviceSynchronize();
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() / calls;
  std::printf("group_norm [1, 512, 128, 128] / 32 groups + SiLU: %.1f us, %.0f GB/s effective\n",
              seconds * 1e6, 4.0 * double(x.nbytes()) / seconds / 1e9);
}

}  // namespace

int main() try {
  const Case cases[] = {
      {{4, 64}, 16, 0.0f},             // [N, C]: one position per plane
      {{2, 32, 5, 7}, 8, 0.5f},        // 35 positions: the scalar path
      {{3, 6, 4097}, 3, -1.0f},        // 3-D, odd, several chunks per group
      {{1, 64, 16, 16}, 32, 0.0f},     // float4 planes, one chunk per group
      {{2, 128, 24, 40}, 32, 40.0f},   // batch 2, mean far from zero
      {{1, 512, 128, 128}, 32, 0.2f},  // the 1024² VAE layer: 262144 values per group
      {{1, 4, 1024, 1024}, 1, 3.0f},   // one group of 4M values: past the chunk cap
  };
  uint64_t seed = 100;
  for (const Case& c : cases) check_case(c, seed += 10);

  const Tensor x = dit::random_tensor({1, 8, 4, 4}, 0.0f, 1.0f, 7, DType::F32);
  const Tensor weight = Tensor::full({8}, 1.0f);
  const std::string host_weight =
      error_message([&] { ops::group_norm(x.to(Device::CUDA), 4, 1e-6f, weight, weight); });
  expect(host_weight.find("group_norm") != std::string::npos &&
             host_weight.find("GPU") != std::string::npos,
         "a GPU input with a host weight is refused in one line: " + host_weight);
  const Tensor device_weight = weight.to(Device::CUDA);
  const std::string device_weight_message =
      error_message([&] { ops::group_norm(x, 4, 1e-6f, device_weight, device_weight); });
  expect(device_weight_message.find("group_norm") != std::string::npos,
         "a CPU input with a GPU weight is refused in one line: " + device_weight_message);
  report_timing();
  return finish("group_norm_cuda_test");
} catch (const std::exception& error) {
  std::printf("group_norm_cuda_test: error: %s\n", error.what());
  return 1;
}
