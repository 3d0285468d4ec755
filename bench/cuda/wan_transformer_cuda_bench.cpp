// One forward of a Wan2.1-1.3B-sized transformer (30 layers, 12 heads x 128, ffn 8960, text_dim
// 4096, random bf16 weights) on the GPU at 480x832, 81 frames (latents [1, 16, 21, 60, 104]:
// 32760 tokens) with 512 text tokens: wall-clock seconds per forward (median of repeats after a
// warm-up, host work included) and the peak GPU memory the caching allocator handed out; with
// dense self-attention (fa), then with sliding_tile_attn (window 2x2x3 tiles of 6x8x8 in every
// layer and head) and video_sparse_attn (sparsity 0.9), about 90% sparse, and sage_attn (dense,
// INT8 Q·Kᵀ with FP8 P·V); each with the blocks' products in bf16 and, with --products
// bf16,fp8, in FP8 too (--gpu-matmul-precision fp8).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "attention/backend_config.h"
#include "attention/sparse_self_attention_cuda.h"
#include "core/cuda/device_memory.h"
#include "core/safetensors.h"
#include "models/dit/wan/wan_random_checkpoint.h"
#include "models/dit/wan/wan_transformer.h"

using namespace mmgen;
namespace fs = std::filesystem;

int main(int argc, char** argv) try {
  int repeats = 5;
  std::string modes_wanted = "dense,sta,vsa";  // --modes: a comma list of these
  std::string products_wanted = "bf16";        // --products: bf16, fp8 or both
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--repeats")
      repeats = std::stoi(argv[i + 1]);
    else if (flag == "--modes")
      modes_wanted = argv[i + 1];
    else if (flag == "--products")
      products_wanted = argv[i + 1];
    else
      throw std::runtime_error("unknown flag " + flag +
                               "; use --repeats N, --modes dense,sta,vsa,sage and --products "
                               "bf16,fp8");
  }
  const dit::WanTransformerConfig config = dit::wan21_1_3b_config();
  const fs::path file = fs::temp_directory_path() / "mmgen_wan_1_3b_random.safetensors";
  if (!fs::exists(file))
    write_safetensors(file, dit::random_checkpoint(config), {{"format", "pt"}});
  dit::WanTransformer gpu(config, WeightStore::open_file(file));
  const auto load_start = std::chrono::steady_clock::now();
  gpu.set_device(Device::CUDA);
  const double load_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - load_start).count();

  const Tensor latents = dit::random_tensor({1, 16, 21, 60, 104}, 0.0f, 1.7f, 101, DType::F32);
  const Tensor text = dit::random_tensor({1, 512, config.text_dim}, 0.0f, 0.3f, 102, DType::F32);
  // STA's mask: the same window for every layer and head at step 0.
  nlohmann::json mask = nlohmann::json::object();
  for (int64_t l = 0; l < config.num_layers; ++l)
    for (int64_t h = 0; h < config.num_attention_heads; ++h)
      mask["0_" + std::to_string(l) + "_" + std::to_string(h)] = {2, 2, 3};
  const fs::path mask_file = fs::temp_directory_path() / "mmgen_wan_1_3b_sta_223.json";
  std::ofstream(mask_file) << mask.dump();
  struct Mode {
    const char* name;
    const char* label;
    std::string backend;
    nlohmann::json config;
  };
  const Mode modes[] = {
      {"dense", "dense self-attention (fa)", "", {}},
      {"sta",
       "sliding_tile_attn, window 2x2x3 tiles",
       "sliding_tile_attn",
       {{"mask_strategy_file_path", mask_file.string()}, {"skip_time_steps", 0}}},
      {"vsa", "video_sparse_attn, sparsity 0.9", "video_sparse_attn", {{"sparsity", 0.9}}},
      {"sage", "sage_attn (INT8 Q·Kᵀ, FP8 P·V)", "sage_attn", nlohmann::json::object()},
  };
  std::printf("Wan2.1-1.3B-sized transformer, 480x832x81 frames (32760 tokens), 512 text tokens\n");
  std::printf("weights on GPU: %.2f GiB (uploaded in %.1f s)\n",
              gpu.resident_weight_bytes() / double(1 << 30), load_seconds);
  for (const bool fp8 : {false, true}) {
    if (("," + products_wanted + ",").find(fp8 ? ",fp8," : ",bf16,") == std::string::npos) continue;
    if (fp8 != gpu.fp8_products()) gpu.set_device(Device::CUDA, DType::BF16, fp8);
    std::printf("== products: %s (weights on GPU: %.2f GiB)\n", fp8 ? "fp8" : "bf16",
                gpu.resident_weight_bytes() / double(1 << 30));
    for (const Mode& mode : modes) {
      if (("," + modes_wanted + ",").find("," + std::string(mode.name) + ",") == std::string::npos)
        continue;
      // Every self-attention layer on the mode's GPU backend (one for all, as the attention
      // builder makes it); the rest dense.
      std::shared_ptr<cuda::SparseSelfAttentionCuda> shared;
      if (!mode.backend.empty())
        shared = cuda::make_sparse_self_attention_cuda(
            mode.backend, attention::validate_backend_config(mode.config, mode.backend));
      attention::Layers attention = attention::layers_from(
          gpu.attention_stacks(), [&](const attention::StackTraits& stack, int64_t) {
            return shared && stack.name == dit::kWanSelfStack ? attention::Layer(shared)
                                                              : attention::Layer();
          });
      cuda::SparseSelfAttentionCuda* sparse = shared.get();
      Tensor out = gpu.forward(latents, 999.0f, text, {}, &attention);  // warm-up
      double density = 1.0;
      if (sparse) {
        sparse->count_pairs(true);
        gpu.forward(latents, 999.0f, text, {}, &attention);
        density = sparse->stats().density();
        sparse->count_pairs(false);
      }
      std::vector<double> seconds;
      for (int i = 0; i < repeats; ++i) {
        const auto start = std::chrono::steady_clock::now();
        out = gpu.forward(latents, 999.0f - 10.0f * float(i), text, {}, &attention);
        seconds.push_back(
            std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
      }
      std::sort(seconds.begin(), seconds.end());
      double sum_abs = 0;
      for (int64_t i = 0; i < out.numel(); ++i) sum_abs += std::abs(out.data<float>()[i]);
      const double gib = double(1 << 30);
      std::printf("%s (self-attention density %.3f)\n", mode.label, density);
      std::printf("forward: median %.3f s, min %.3f s, max %.3f s over %d repeats\n",
                  seconds[seconds.size() / 2], seconds.front(), seconds.back(), repeats);
      std::printf("peak GPU memory (allocator): %.2f GiB; output mean |x| %.4f\n",
                  cuda::CachingAllocator::instance().peak_bytes_in_use() / gib,
                  sum_abs / double(out.numel()));
    }
  }
  return 0;
} catch (const std::exception& error) {
  std::fprintf(stderr, "wan_transformer_cuda_bench: %s\n", error.what());
  return 1;
}
