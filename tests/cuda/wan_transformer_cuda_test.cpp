// The Wan transformer placed on the GPU (one class: WanTransformer::set_device) against the same
// model on the CPU (float32, itself checked against diffusers) on the same random bf16 checkpoint,
// latents, text and timestep: head size 128 (the flash kernels) and 32 (the reference kernel),
// batch 1 and 2; and with sliding_tile_attn / video_sparse_attn self-attention on both sides (the
// GPU backends against the CPU ones inside the model); and with FP8 products.
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "attention/backend.h"
#include "attention/backend_config.h"
#include "attention/sparse_self_attention_cuda.h"
#include "core/fp8_convert.h"
#include "core/gguf_convert.h"
#include "core/safetensors.h"
#include "cuda_test_support.h"
#include "models/dit/wan/wan_block.h"
#include "models/dit/wan/wan_random_checkpoint.h"
#include "models/dit/wan/wan_transformer.h"

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
  attention::Layers cpu_attention, gpu_attention;
  if (sparse) {
    const nlohmann::json settings =
        attention::validate_backend_config(sparse->config, sparse->backend);
    // The CPU's layers each their own backend; the GPU's one backend for every self-attention
    // layer, as the attention builder makes them (cross-attention: the dense reference).
    cpu_attention = attention::layers_from(
        cpu.attention_stacks(), [&](const attention::StackTraits& stack, int64_t) {
          return stack.name == dit::kWanSelfStack
                     ? attention::Layer(attention::make_dit_backend(sparse->backend, settings))
                     : attention::Layer();
        });
    const std::shared_ptr<attention::AttentionBackend> shared =
        cuda::make_sparse_self_attention_cuda(sparse->backend, settings);
    gpu_attention = attention::layers_from(
        gpu.attention_stacks(), [&](const attention::StackTraits& stack, int64_t) {
          return stack.name == dit::kWanSelfStack ? attention::Layer(shared) : attention::Layer();
        });
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

// The small model the file-format and streaming cases share: 2 heads of 128 (the flash
// kernels), ffn 768, `layers` blocks.
dit::WanTransformerConfig two_heads_of_128(int64_t layers) {
  dit::WanTransformerConfig config;
  config.num_attention_heads = 2;
  config.attention_head_dim = 128;
  config.ffn_dim = 3 * 256;
  config.num_layers = layers;
  config.text_dim = 64;
  config.rope_max_seq_len = 64;
  return config;
}

// A checkpoint in ComfyUI's scaled-FP8 layout (mmgen convert --type fp8_e4m3). With FP8 products
// its e4m3 matrices go up as stored: a block's weight downloads to the file's bytes and scales,
// the upload keeps the plan's FP8 figure, and the forward is within the FP8 bound of the CPU
// forward from the same file (which computes on the same e4m3 values, so only the activations'
// quantization and bf16 differ). With bf16 products the forward is within the bf16 bound.
void fp8_file_case() {
  const dit::WanTransformerConfig config = two_heads_of_128(2);
  const fs::path file = fs::temp_directory_path() / "mmgen_wan_cuda_test_bf16.safetensors";
  const fs::path fp8_file = fs::temp_directory_path() / "mmgen_wan_cuda_test_fp8.safetensors";
  write_safetensors(file, dit::random_checkpoint(config), {{"format", "pt"}});
  fp8::convert_to_fp8(WeightStore::open_file(file), fp8_file, {});
  const WeightStore store = WeightStore::open_file(fp8_file);
  const Tensor stored = store.get_for_product("blocks.1.ffn.net.2.weight");
  const Tensor uploaded = dit::WanBlockWeights::load(store, 1, config)
                              .placed({Device::CUDA, DType::BF16, true, true})
                              .ffn_out_weight.to(Device::CPU);
  expect(stored.dtype() == DType::F8E4M3Rows && uploaded.dtype() == DType::F8E4M3Rows &&
             uploaded.nbytes() == stored.nbytes() &&
             std::memcmp(uploaded.raw(), stored.raw(), stored.nbytes()) == 0,
         "an FP8 file's e4m3 rows go to the GPU as stored, scales included");
  const dit::WanTransformer cpu(config, store);
  dit::WanTransformer gpu_fp8(config, store), gpu_bf16(config, store);
  gpu_fp8.set_device(Device::CUDA, DType::BF16, true);
  gpu_bf16.set_device(Device::CUDA, DType::BF16, false);
  expect(gpu_fp8.resident_weight_bytes() == dit::WanTransformer::gpu_weight_bytes(config, true),
         fmt::format("fp8 file: the memory plan's figure ({}) is what the upload keeps ({})",
                     dit::WanTransformer::gpu_weight_bytes(config, true),
                     gpu_fp8.resident_weight_bytes()));
  const Tensor latents = dit::random_tensor({1, 16, 1, 16, 16}, 0.0f, 1.7f, 11, DType::F32);
  const Tensor text = dit::random_tensor({1, 23, config.text_dim}, 0.0f, 0.5f, 12, DType::F32);
  attention::Layers attention;
  const Tensor expected = cpu.forward(latents, 431.0f, text, {}, nullptr);
  const double fp8_error =
      relative_error(gpu_fp8.forward(latents, 431.0f, text, {}, &attention), expected);
  const double bf16_error =
      relative_error(gpu_bf16.forward(latents, 431.0f, text, {}, &attention), expected);
  expect(fp8_error < 5e-2, fmt::format("fp8 file, FP8 products: GPU vs CPU relative error {:.2e} "
                                       "< 5e-2",
                                       fp8_error));
  expect(bf16_error < 3e-3, fmt::format("fp8 file, bf16 products: GPU vs CPU relative error {:.2e} "
                                        "< 3e-3",
                                        bf16_error));
  std::printf("fp8 file: GPU vs CPU relative error %.3e (FP8 products), %.3e (bf16)\n", fp8_error,
              bf16_error);
  fs::remove(file);
  fs::remove(fp8_file);
}

// Streamed blocks (WanTransformer::set_device's stream_blocks, --gpu-offload blocks): the same
// kernels on the same bytes, so the forward equals the resident one to the bit, in bf16 and with
// FP8 products, forward after forward (each forward's last block starts the next one's first
// copy; an odd layer count puts it in the other slot) and alternating with another batch size
// (guidance's two forwards). Two slots of one block are what stays resident, as the plan says.
void streamed_case() {
  const dit::WanTransformerConfig config = two_heads_of_128(3);
  const fs::path file = fs::temp_directory_path() / "mmgen_wan_cuda_test_streamed.safetensors";
  write_safetensors(file, dit::random_checkpoint(config), {{"format", "pt"}});
  const WeightStore store = WeightStore::open_file(file);
  for (const bool fp8 : {false, true}) {
    dit::WanTransformer resident(config, store), streamed(config, store);
    resident.set_device(Device::CUDA, DType::BF16, fp8);
    streamed.set_device(Device::CUDA, DType::BF16, fp8, true);
    const uint64_t plan = dit::WanTransformer::gpu_weight_bytes(config, fp8, true);
    expect(streamed.streams_blocks() && streamed.resident_weight_bytes() == plan &&
               plan < dit::WanTransformer::gpu_weight_bytes(config, fp8),
           fmt::format("streamed blocks ({}): {} bytes resident, the plan's {}, below the resident "
                       "model's {}",
                       fp8 ? "fp8" : "bf16", streamed.resident_weight_bytes(), plan,
                       resident.resident_weight_bytes()));
    attention::Layers attention;
    int64_t differing = 0;
    for (int repeat = 0; repeat < 2; ++repeat)
      for (const int64_t batch : {int64_t(1), int64_t(2)}) {
        const Tensor latents =
            dit::random_tensor({batch, 16, 1, 16, 16}, 0.0f, 1.7f, 11 + batch, DType::F32);
        const Tensor text =
            dit::random_tensor({batch, 23, config.text_dim}, 0.0f, 0.5f, 12, DType::F32);
        const Tensor a = resident.forward(latents, 431.0f, text, {}, &attention);
        const Tensor b = streamed.forward(latents, 431.0f, text, {}, &attention);
        differing += a.nbytes() != b.nbytes() || std::memcmp(a.raw(), b.raw(), a.nbytes()) != 0;
      }
    expect(differing == 0, fmt::format("streamed blocks ({}): {} of 4 forwards differ from the "
                                       "resident model's",
                                       fp8 ? "fp8" : "bf16", differing));
  }
  fs::remove(file);
}

// A GGUF transformer (q8_0, and q4_k) on the GPU: its matrices stay their quantized blocks there
// and each is expanded just before its product, so the upload keeps the plan's figure from the
// stored types (less than bf16's) and the forward is the forward of the same values uploaded as
// bf16 to the bit, resident or streamed.
void gguf_case() {
  const dit::WanTransformerConfig config = two_heads_of_128(2);
  const fs::path file = fs::temp_directory_path() / "mmgen_wan_cuda_test_gguf.safetensors";
  write_safetensors(file, dit::random_checkpoint(config), {{"format", "pt"}});
  const Tensor latents = dit::random_tensor({1, 16, 1, 16, 16}, 0.0f, 1.7f, 11, DType::F32);
  const Tensor text = dit::random_tensor({1, 23, config.text_dim}, 0.0f, 0.5f, 12, DType::F32);
  attention::Layers attention;
  for (const gguf::GgmlType type : {gguf::GgmlType::Q8_0, gguf::GgmlType::Q4_K}) {
    const std::string name = type == gguf::GgmlType::Q8_0 ? "q8_0" : "q4_k";
    const fs::path quantized =
        fs::temp_directory_path() / ("mmgen_wan_cuda_test_" + name + ".gguf");
    gguf::convert_to_gguf(WeightStore::open_file(file), quantized, type,
                          {{"general.architecture", "wan"}});
    const WeightStore store = WeightStore::open_file(quantized);
    NamedTensors values;
    for (const std::string& tensor : store.names())
      values.push_back({tensor, store.get_f32(tensor)});
    const fs::path expanded = fs::temp_directory_path() / ("mmgen_wan_cuda_test_" + name + ".f32");
    write_safetensors(expanded, values);
    dit::WanTransformer blocks(config, store), streamed(config, store),
        bf16(config, WeightStore::open_file(expanded));
    blocks.set_device(Device::CUDA);
    streamed.set_device(Device::CUDA, DType::BF16, false, true);
    bf16.set_device(Device::CUDA);
    const uint64_t plan = dit::WanTransformer::gpu_weight_bytes(config, false, false, &store);
    expect(blocks.resident_weight_bytes() == plan &&
               plan < dit::WanTransformer::gpu_weight_bytes(config, false) &&
               streamed.resident_weight_bytes() ==
                   dit::WanTransformer::gpu_weight_bytes(config, false, true, &store),
           fmt::format("{}: {} bytes resident (bf16 would be {}), the plan's {}", name,
                       blocks.resident_weight_bytes(), bf16.resident_weight_bytes(), plan));
    const Tensor expected = bf16.forward(latents, 431.0f, text, {}, &attention);
    const Tensor a = blocks.forward(latents, 431.0f, text, {}, &attention);
    const Tensor b = streamed.forward(latents, 431.0f, text, {}, &attention);
    expect(
        std::memcmp(a.raw(), expected.raw(), expected.nbytes()) == 0 &&
            std::memcmp(b.raw(), expected.raw(), expected.nbytes()) == 0,
        name + ": the forward from GPU blocks (resident and streamed) is the bf16 one to the bit");
    fs::remove(quantized);
    fs::remove(expanded);
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
  fp8_file_case();
  streamed_case();
  gguf_case();
  return finish("wan_transformer_cuda_test");
} catch (const std::exception& error) {
  std::printf("wan_transformer_cuda_test: error: %s\n", error.what());
  return 1;
}
