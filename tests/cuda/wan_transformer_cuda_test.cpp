// The GPU Wan transformer against the CPU one (float32, itself checked against diffusers) on the
// same random bf16 checkpoint, latents, text and timestep: head size 128 (the flash kernels) and
// 32 (the reference kernel), batch 1 and 2.
#include "models/cuda/wan_transformer_cuda.h"

#include <cmath>
#include <filesystem>

#include "core/safetensors.h"
#include "cuda_test_support.h"
#include "models/dit/wan_random_checkpoint.h"
#include "models/dit/wan_transformer.h"

using namespace mmgen;
using namespace mmgen::cuda_testing;
namespace fs = std::filesystem;

namespace {

double relative_error(const Tensor& actual, const Tensor& expected) {
  double difference = 0, norm = 0;
  const float* a = actual.data<float>();
  const float* e = expected.data<float>();
  for (int64_t i = 0; i < expected.numel(); ++i) {
    difference += (double(a[i]) - e[i]) * (double(a[i]) - e[i]);
    norm += double(e[i]) * e[i];
  }
  return std::sqrt(difference / norm);
}

void run_case(int64_t heads, int64_t head_dim, int64_t batch, const Shape& latent_shape) {
  dit::WanTransformerConfig config;
  config.num_attention_heads = heads;
  config.attention_head_dim = head_dim;
  config.ffn_dim = 3 * heads * head_dim;
  config.num_layers = 2;
  config.text_dim = 64;
  config.rope_max_seq_len = 64;
  const fs::path file =
      fs::temp_directory_path() /
      ("mmgen_wan_cuda_test_" + std::to_string(heads * head_dim) + ".safetensors");
  write_safetensors(file, dit::random_checkpoint(config), {{"format", "pt"}});
  const dit::WanTransformer cpu(config, WeightStore::open_file(file));
  const cuda::WanTransformerCuda gpu(cpu);

  Shape shape = latent_shape;
  shape[0] = batch;
  const Tensor latents = dit::random_tensor(shape, 0.0f, 1.7f, 11, DType::F32);
  const Tensor text = dit::random_tensor({batch, 23, config.text_dim}, 0.0f, 0.5f, 12, DType::F32);
  for (const float timestep : {999.0f, 431.0f}) {
    const Tensor expected = cpu.forward(latents, timestep, text);
    const Tensor actual = gpu.forward(latents, timestep, text);
    bool finite = actual.shape() == expected.shape();
    for (int64_t i = 0; finite && i < actual.numel(); ++i)
      finite = std::isfinite(actual.data<float>()[i]);
    const double error = finite ? relative_error(actual, expected) : INFINITY;
    expect(error < 3e-3,
           fmt::format("heads {} x {}, batch {}, latents {}, t={}: GPU vs CPU relative error "
                       "{:.2e} < 3e-3 (bf16 per component)",
                       heads, head_dim, batch, shape_string(shape), timestep, error));
  }
  fs::remove(file);
}

}  // namespace

int main() try {
  run_case(2, 128, 1, {1, 16, 3, 16, 20});  // 3 x 8 x 10 = 240 tokens: a partial key block
  run_case(2, 128, 2, {1, 16, 1, 16, 16});
  run_case(4, 32, 1, {1, 16, 2, 8, 12});  // head size 32: the reference attention kernel
  return finish("wan_transformer_cuda_test");
} catch (const std::exception& error) {
  std::printf("wan_transformer_cuda_test: error: %s\n", error.what());
  return 1;
}
