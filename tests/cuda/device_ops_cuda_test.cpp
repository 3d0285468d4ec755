// The device-neutral ops on the GPU against the same ops on the CPU (core/ops.h): a tensor moved
// to the GPU and back is unchanged; float32 <-> bf16 conversion rounds as the host does; linear
// (bf16 and float32 products, bias, bf16 output), rms_norm, activations, add, mul, scale and
// random_uniform agree with the CPU within the rounding their dtype allows; and a GPU op handed a
// host weight refuses in one line.
#include <fmt/format.h>

#include <cmath>
#include <cstring>

#include "core/ops.h"
#include "core/tensor.h"
#include "cuda_test_support.h"

using namespace mmgen;
using namespace mmgen::cuda_testing;

namespace {

Tensor random_tensor(const Shape& shape, uint64_t seed, float scale = 1.0f) {
  return ops::random_uniform(shape, DType::F32, Device::CPU, seed, scale);
}

bool identical(const Tensor& a, const Tensor& b) {
  return a.nbytes() == b.nbytes() && std::memcmp(a.raw(), b.raw(), a.nbytes()) == 0;
}

}  // namespace

int main() try {
  // Round trip and conversion.
  const Tensor x = random_tensor({37, 96}, 1);
  const Tensor on_gpu = x.to(Device::CUDA);
  expect(on_gpu.device() == Device::CUDA && on_gpu.shape() == x.shape(), "to(CUDA) keeps shape");
  expect(identical(on_gpu.to(Device::CPU), x), "float32 round trip through the GPU is exact");
  expect(identical(on_gpu.to(DType::BF16).to(Device::CPU), x.to(DType::BF16)),
         "float32 -> bf16 on the GPU rounds as the host does (bit for bit)");
  expect(identical(on_gpu.to(DType::BF16).to(DType::F32).to(Device::CPU),
                   x.to(DType::BF16).to(DType::F32)),
         "bf16 -> float32 on the GPU is exact");
  expect(identical(on_gpu.slice(0, 5, 9).to(Device::CPU), x.slice(0, 5, 9).contiguous()),
         "a row slice of a GPU tensor is a view that copies back correctly");
  expect(!error_message([&] {
            (void)on_gpu.item_f32({0, 0});
          }).empty(),
         "item_f32 on a GPU tensor refuses instead of reading device memory");

  // Products: bf16 (float32 and bf16 results), float32 (the exact mode), with and without bias.
  const Tensor w = random_tensor({80, 96}, 2, 0.1f), b = random_tensor({80}, 3);
  const Tensor w16 = w.to(DType::BF16), x16 = x.to(DType::BF16);
  const Tensor expected = ops::linear(x16.to(DType::F32), w16, b);
  const Tensor bf16_f32 =
      ops::linear(x16.to(Device::CUDA), w16.to(Device::CUDA), b.to(Device::CUDA), DType::F32);
  expect(bf16_f32.dtype() == DType::F32 && bf16_f32.device() == Device::CUDA,
         "bf16 linear with a float32 result stays on the GPU");
  double error = relative_error(bf16_f32, expected);
  expect(error < 1e-5, fmt::format("bf16 linear (float32 out) vs CPU {:.2e} < 1e-5", error));
  error = relative_error(
      ops::linear(x16.to(Device::CUDA), w16.to(Device::CUDA), b.to(Device::CUDA), DType::BF16),
      expected);
  expect(error < 8e-3, fmt::format("bf16 linear (bf16 out) vs CPU {:.2e} < 8e-3", error));
  error = relative_error(ops::linear(on_gpu, w.to(Device::CUDA), b.to(Device::CUDA)),
                         ops::linear(x, w, b));
  expect(error < 1e-6, fmt::format("float32 linear vs CPU {:.2e} < 1e-6", error));
  error = relative_error(ops::linear(on_gpu, w.to(Device::CUDA)), ops::linear(x, w));
  expect(error < 1e-6, fmt::format("float32 linear without bias vs CPU {:.2e} < 1e-6", error));
  const std::string refused = error_message([&] { ops::linear(on_gpu, w); });
  expect(refused.find("weight") != std::string::npos && refused.find("cpu") != std::string::npos,
         "a GPU input with a host weight is refused in one line: " + refused);

  // Norm, activations, element-wise.
  const Tensor norm_weight = random_tensor({96}, 4);
  error = relative_error(ops::rms_norm(on_gpu, norm_weight.to(Device::CUDA), 1e-6f),
                         ops::rms_norm(x, norm_weight, 1e-6f));
  expect(error < 1e-6, fmt::format("rms_norm (float32 out) vs CPU {:.2e} < 1e-6", error));
  const Tensor norm16 = ops::rms_norm(on_gpu, norm_weight.to(Device::CUDA), 1e-6f, DType::BF16);
  error = relative_error(norm16, ops::rms_norm(x, norm_weight, 1e-6f));
  expect(norm16.dtype() == DType::BF16 && error < 4e-3,
         fmt::format("rms_norm (bf16 out) vs CPU {:.2e} < 4e-3", error));
  // Each register-slot count of the float4 kernel (rows up to 1024, 2048, 4096, 8192 wide), a
  // width the float4 kernel cannot take (not a multiple of 4) and one above its reach.
  for (const int64_t width : {1536, 3840, 5120, 10, 9000}) {
    const Tensor rows = random_tensor({5, width}, 40 + width);
    const Tensor weight = random_tensor({width}, 41 + width);
    error = relative_error(ops::rms_norm(rows.to(Device::CUDA), weight.to(Device::CUDA), 1e-6f),
                           ops::rms_norm(rows, weight, 1e-6f));
    expect(error < 1e-6,
           fmt::format("rms_norm [5, {}] (float32 out) vs CPU {:.2e} < 1e-6", width, error));
  }
  for (const auto& [activation, name] :
       {std::pair{Activation::Relu, "relu"}, std::pair{Activation::Gelu, "gelu"},
        std::pair{Activation::GeluTanh, "gelu_tanh"}, std::pair{Activation::Silu, "silu"}}) {
    Tensor cpu = x.clone(), gpu = x.to(Device::CUDA);
    ops::activate_(cpu, activation);
    ops::activate_(gpu, activation);
    error = relative_error(gpu, cpu);
    expect(error < 1e-6, fmt::format("{} vs CPU {:.2e} < 1e-6", name, error));
  }
  const Tensor y = random_tensor({37, 96}, 5);
  Tensor sum = x.to(Device::CUDA), product = x.to(Device::CUDA), scaled = x.to(Device::CUDA);
  ops::add_(sum, y.to(Device::CUDA));
  ops::mul_(product, y.to(Device::CUDA));
  ops::scale_(scaled, 0.5f);
  Tensor cpu_sum = x.clone(), cpu_product = x.clone(), cpu_scaled = x.clone();
  ops::add_(cpu_sum, y);
  ops::mul_(cpu_product, y);
  ops::scale_(cpu_scaled, 0.5f);
  expect(identical(sum.to(Device::CPU), cpu_sum), "add_ on the GPU equals the CPU's");
  expect(identical(product.to(Device::CPU), cpu_product), "mul_ on the GPU equals the CPU's");
  expect(identical(scaled.to(Device::CPU), cpu_scaled), "scale_ on the GPU equals the CPU's");

  // Rows repeated in blocks (dual chunk attention's three query copies): the CPU's bytes.
  expect(identical(ops::repeat_rows(x.to(Device::CUDA), 3).to(Device::CPU), ops::repeat_rows(x, 3)),
         "repeat_rows on the GPU equals the CPU's");
  expect(identical(ops::repeat_rows(x.to(DType::BF16).to(Device::CUDA), 2).to(Device::CPU),
                   ops::repeat_rows(x.to(DType::BF16), 2)),
         "repeat_rows of bf16 rows on the GPU equals the CPU's");

  // The random fill: the same numbers on both devices.
  expect(identical(ops::random_uniform({1000}, DType::BF16, Device::CUDA, 9, 0.5f).to(Device::CPU),
                   ops::random_uniform({1000}, DType::BF16, Device::CPU, 9, 0.5f)),
         "random_uniform gives the same bf16 values on the GPU and the CPU");
  return finish("device_ops_cuda_test");
} catch (const std::exception& error) {
  std::printf("device_ops_cuda_test: error: %s\n", error.what());
  return 1;
}
