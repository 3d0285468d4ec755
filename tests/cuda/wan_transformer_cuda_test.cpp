// The Wan transformer placed on the GPU (one class: WanTransformer::set_device) against the same
// model on the CPU (float32, itself checked against diffusers) on the same random bf16 checkpoint,
// latents, text and timestep: head size 128 (the flash kernels) and 32 (the reference kernel),
// batch 1 and 2; and with sliding_tile_attn / video_sparse_attn self-attention on both sides (the
// GPU backends against the CPU ones inside the model); and with FP8 products.
#include <cmath>
#include <filesystem>
#include <fstream>

#include "attention/backend.h"
#include "attention/backend_config.h"
#include "attention/sparse_self_attention_cuda.h"
#include "core/safetensors.h"
#include "cuda_test_support.h"
#include "models/dit/wan_random_checkpoint.h"
#include "models/dit/wan_transformer.h"

using namespace mmgen;
using namespace mmgen::cuda_testing;
namespace fs = std::filesystem;

namespace {

// A sparse self-attention backend for both models: name, settings, and the error bound (VSA's
// cube choice may differ where bf16 q/k move a near tie; STA's pattern is fixed).
struct Sparse {
  std::string backend;
  nlohmann::json config;
  double bound = 3e-3;
};

// `fp8`: the GPU model with FP8 products (--gpu-matmul-precision fp8), whose error against the
// CPU must stay below 5e-2: e4m3 keeps 3 mantissa bits, one product of quantized operands is
// about 3.7e-2 from the bf16 one on random data (gemm_fp8_cuda_bench), and the residual stream
// carries the patch embedding's exact part past every block. It must also exceed the bf16
// model's error, or the FP8 path did not run.
void run_case(int64_t heads, int64_t head_dim, int64_t batch, const Shape& latent_shape,
              const Sparse* sparse = nullptr, bool fp8 = false) {
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
  dit::WanTransformer gpu(config, WeightStore::open_file(file));
  gpu.set_device(Device::CUDA);
  expect(gpu.device() == Device::CUDA && gpu.resident_weight_bytes() > 0,
         "set_device(CUDA) uploads the weights");
  expect(gpu.resident_weight_bytes() == dit::WanTransformer::gpu_weight_bytes(config, false),
         fmt::format("the memory plan's figure from the config ({}) is what the upload keeps "
                     "resident ({})",
                     dit::WanTransformer::gpu_weight_bytes(config, false),
                     gpu.resident_weight_bytes()));
  dit::WanTransformer gpu_fp8(config, WeightStore::open_file(file));
  if (fp8) {
    gpu_fp8.set_device(Device::CUDA, DType::BF16, true);
    expect(gpu_fp8.fp8_products() &&
               gpu_fp8.resident_weight_bytes() < gpu.resident_weight_bytes() * 3 / 4,
           fmt::format("set_device(CUDA, fp8 products) keeps the blocks' products in e4m3: {} "
                       "resident bytes against bf16's {}",
                       gpu_fp8.resident_weight_bytes(), gpu.resident_weight_bytes()));
    expect(gpu_fp8.resident_weight_bytes() == dit::WanTransformer::gpu_weight_bytes(config, true),
           fmt::format("fp8: the memory plan's figure ({}) is what the upload keeps ({})",
                       dit::WanTransformer::gpu_weight_bytes(config, true),
                       gpu_fp8.resident_weight_bytes()));
  }

  Shape shape = latent_shape;
  shape[0] = batch;
  const Tensor latents = dit::random_tensor(shape, 0.0f, 1.7f, 11, DType::F32);
  const Tensor text = dit::random_tensor({batch, 23, config.text_dim}, 0.0f, 0.5f, 12, DType::F32);
  dit::WanAttention cpu_attention;
  dit::WanAttention gpu_attention;
  if (sparse) {
    const nlohmann::json settings =
        attention::validate_backend_config(sparse->config, sparse->backend);
    cpu_attention.layers.resize(size_t(config.num_layers));
    for (auto& layer : cpu_attention.layers)
      layer.self_attention = attention::make_dit_backend(sparse->backend, settings);
    gpu_attention.gpu.sparse = cuda::make_sparse_self_attention_cuda(sparse->backend, settings);
  }
  for (const float timestep : {999.0f, 431.0f}) {
    const Tensor expected =
        cpu.forward(latents, timestep, text, {}, sparse ? &cpu_attention : nullptr);
    const Tensor actual = gpu.forward(latents, timestep, text, {}, &gpu_attention);
    bool finite = actual.shape() == expected.shape();
    for (int64_t i = 0; finite && i < actual.numel(); ++i)
      finite = std::isfinite(actual.data<float>()[i]);
    const double error = finite ? relative_error(actual, expected) : INFINITY;
    const double bound = sparse ? sparse->bound : 3e-3;
    expect(error < bound,
           fmt::format("heads {} x {}, batch {}, latents {}, t={}{}: GPU vs CPU relative error "
                       "{:.2e} < {:.0e} (bf16)",
                       heads, head_dim, batch, shape_string(shape), timestep,
                       sparse ? ", " + sparse->backend : std::string(), error, bound));
    if (!fp8) continue;
    const Tensor quantized = gpu_fp8.forward(latents, timestep, text, {}, &gpu_attention);
    bool fp8_finite = quantized.shape() == expected.shape();
    for (int64_t i = 0; fp8_finite && i < quantized.numel(); ++i)
      fp8_finite = std::isfinite(quantized.data<float>()[i]);
    const double fp8_error = fp8_finite ? relative_error(quantized, expected) : INFINITY;
    expect(fp8_error < 5e-2 && fp8_error > error,
           fmt::format("heads {} x {}, batch {}, latents {}, t={}: FP8 products vs CPU relative "
                       "error {:.2e} < 5e-2, above bf16's {:.2e}",
                       heads, head_dim, batch, shape_string(shape), timestep, fp8_error, error));
  }
  fs::remove(file);
}

}  // namespace

int main() try {
  run_case(2, 128, 1, {1, 16, 3, 16, 20});  // 3 x 8 x 10 = 240 tokens: a partial key block
  run_case(2, 128, 2, {1, 16, 1, 16, 16}, nullptr, /*fp8=*/true);
  run_case(4, 32, 1, {1, 16, 2, 8, 12}, nullptr, true);  // head size 32: the reference kernel
  // Sparse self-attention on a 7 x 10 x 13 patch grid: partial tiles and cubes on every axis.
  const fs::path mask = fs::temp_directory_path() / "mmgen_wan_cuda_test_sta.json";
  std::ofstream(mask) << R"({"0_0_0": [1, 2, 2], "0_0_1": [2, 1, 3], "0_1_0": [1, 1, 2],
                            "0_1_1": [2, 2, 2]})";
  const Sparse sta{"sliding_tile_attn",
                   {{"mask_strategy_file_path", mask.string()},
                    {"skip_time_steps", 0},
                    {"tile_size", {3, 4, 4}}}};
  const Sparse vsa{"video_sparse_attn", {{"sparsity", 0.75}}, 1e-2};
  run_case(2, 64, 1, {1, 16, 7, 20, 26}, &sta);
  run_case(2, 128, 2, {1, 16, 7, 20, 26}, &vsa);
  return finish("wan_transformer_cuda_test");
} catch (const std::exception& error) {
  std::printf("wan_transformer_cuda_test: error: %s\n", error.what());
  return 1;
}
