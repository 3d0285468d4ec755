// GGUF blocks on the GPU (issue 23): every quantized type of tests/data/gguf/types.gguf (written
// by the `gguf` package) expanded on the GPU gives gguf::dequantize's float32 values to the bit,
// and its bf16 values are those rounded to nearest even; ops::linear with a block weight on the GPU
// is the product with the expanded bf16 weight to the bit.
#include <cstring>
#include <filesystem>

#include "core/gguf.h"
#include "core/ops.h"
#include "cuda_test_support.h"
#include "models/dit/wan/wan_random_checkpoint.h"

using namespace mmgen;
using namespace mmgen::cuda_testing;
namespace fs = std::filesystem;

int main() try {
  const gguf::GgufFile file =
      gguf::GgufFile::open(fs::path(MMGEN_SOURCE_DIR) / "tests/data/gguf/types.gguf");
  for (const char* name : {"q8_0", "q4_0", "q4_1", "q5_0", "q5_1", "q4_k", "q5_k", "q6_k"}) {
    const Tensor blocks = file.quantized_blocks(name);
    const Tensor host = file.to_f32(name);
    const Tensor on_gpu = blocks.to(Device::CUDA);
    const Tensor f32 = on_gpu.to(DType::F32).to(Device::CPU);
    const Tensor bf16 = on_gpu.to(DType::BF16).to(Device::CPU);
    const Tensor host_bf16 = host.to(DType::BF16);
    expect(f32.numel() == host.numel() && std::memcmp(f32.raw(), host.raw(), host.nbytes()) == 0,
           std::string(name) + ": the GPU's float32 values are gguf::dequantize's to the bit");
    expect(bf16.numel() == host.numel() &&
               std::memcmp(bf16.raw(), host_bf16.raw(), host_bf16.nbytes()) == 0,
           std::string(name) + ": the GPU's bf16 values are those rounded to nearest even");
    if (blocks.dim() != 2) continue;
    const int64_t k = host.shape().back();
    const Tensor x = dit::random_tensor({5, k}, 0.0f, 1.0f, 3, DType::BF16).to(Device::CUDA);
    const Tensor expanded = host.view({host.numel() / k, k}).to(DType::BF16).to(Device::CUDA);
    const Tensor a = ops::linear(x, on_gpu, Tensor(), DType::F32).to(Device::CPU);
    const Tensor b = ops::linear(x, expanded, Tensor(), DType::F32).to(Device::CPU);
    expect(std::memcmp(a.raw(), b.raw(), a.nbytes()) == 0,
           std::string(name) + ": a product with the blocks is the one with the bf16 values");
  }
  return finish("gguf_cuda_test");
} catch (const std::exception& error) {
  std::printf("gguf_cuda_test: error: %s\n", error.what());
  return 1;
}
