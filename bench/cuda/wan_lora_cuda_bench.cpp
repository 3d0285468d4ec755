// What a LoRA costs a Wan2.1-1.3B-sized transformer (random bf16 weights, as
// wan_transformer_cuda_bench) on the GPU at 480x832x81 (32760 tokens, 512 text tokens, dense
// attention): a random rank-R LoRA (default 64) on every linear layer of the 30 blocks
// (self- and cross-attention's q, k, v, out and the feed-forward's two: 300 layers, in diffusers'
// names, bf16), then one forward without it, with it merged at load, and with it added at run
// time (median seconds of repeats after a warm-up); and the LoRA's load: reading the file, the
// merge into the weights (host, float32) and the runtime updates' preparation. The LoRA file is
// left at --lora-file (default in the temp folder) for diffusers_wan_lora.py to load the same.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/safetensors.h"
#include "models/dit/wan/wan_random_checkpoint.h"
#include "models/dit/wan/wan_transformer.h"
#include "models/lora/lora_file.h"
#include "models/lora/lora_merge.h"

using namespace mmgen;
namespace fs = std::filesystem;

namespace {

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

int main(int argc, char** argv) try {
  int repeats = 5;
  int64_t rank = 64;
  fs::path lora_path = fs::temp_directory_path() / "mmgen_wan_1_3b_lora.safetensors";
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--repeats")
      repeats = std::stoi(argv[i + 1]);
    else if (flag == "--rank")
      rank = std::stoll(argv[i + 1]);
    else if (flag == "--lora-file")
      lora_path = argv[i + 1];
    else
      throw std::runtime_error("unknown flag " + flag +
                               "; use --repeats N, --rank R and --lora-file PATH");
  }
  const dit::WanTransformerConfig config = dit::wan21_1_3b_config();
  const fs::path file = fs::temp_directory_path() / "mmgen_wan_1_3b_random.safetensors";
  if (!fs::exists(file))
    write_safetensors(file, dit::random_checkpoint(config), {{"format", "pt"}});
  write_safetensors(lora_path, dit::random_lora(config, rank), {{"format", "pt"}});
  const WeightStore base = WeightStore::open_file(file);

  const Tensor latents = dit::random_tensor({1, 16, 21, 60, 104}, 0.0f, 1.7f, 101, DType::F32);
  const Tensor text = dit::random_tensor({1, 512, config.text_dim}, 0.0f, 0.3f, 102, DType::F32);
  Tensor merged_out;
  const auto time_forward = [&](const WeightStore& store, const char* label) {
    dit::WanTransformer gpu(config, store);
    gpu.set_device(Device::CUDA);
    Tensor out = gpu.forward(latents, 999.0f, text);  // warm-up
    std::vector<double> seconds;
    for (int i = 0; i < repeats; ++i) {
      const auto start = std::chrono::steady_clock::now();
      out = gpu.forward(latents, 999.0f - 10.0f * float(i), text);
      seconds.push_back(seconds_since(start));
    }
    std::sort(seconds.begin(), seconds.end());
    std::printf("%-28s forward: median %.4f s, min %.4f s, max %.4f s over %d repeats\n", label,
                seconds[seconds.size() / 2], seconds.front(), seconds.back(), repeats);
    std::fflush(stdout);
    return std::pair{seconds[seconds.size() / 2], out};
  };

  std::printf("Wan2.1-1.3B-sized transformer, 480x832x81 (32760 tokens), 512 text tokens\n");
  std::printf("LoRA: rank %lld on the 300 linear layers of the blocks, %.1f MB (bf16) at %s\n",
              static_cast<long long>(rank), fs::file_size(lora_path) / 1e6, lora_path.c_str());
  const dit::WanTransformer plain(config, base);
  const models::ParameterList tree = [&](const models::ParameterVisitor& visit) {
    plain.list_parameters(visit);
  };
  auto start = std::chrono::steady_clock::now();
  const lora::LoraFile lora_file =
      lora::read_lora_file(lora_path, "transformer", dit::WanTransformer::lora_targets);
  const double read_seconds = seconds_since(start);
  start = std::chrono::steady_clock::now();
  const WeightStore merged = lora::merge_loras(base, tree, {{&lora_file, 1.0}}, "Wan");
  const double merge_seconds = seconds_since(start);
  start = std::chrono::steady_clock::now();
  const WeightStore runtime = lora::with_runtime_loras(base, tree, {{&lora_file, 1.0}}, "Wan");
  const double runtime_seconds = seconds_since(start);
  std::printf(
      "load: read %.3f s; merged into the weights in %.3f s; runtime updates made in "
      "%.3f s (%zu layers)\n",
      read_seconds, merge_seconds, runtime_seconds, lora_file.layers.size());

  const auto [none, none_out] = time_forward(base, "no LoRA");
  const auto [with_merged, merged_result] = time_forward(merged, "LoRA merged");
  const auto [with_runtime, runtime_result] = time_forward(runtime, "LoRA at run time");
  double difference = 0, norm = 0, change = 0;
  for (int64_t i = 0; i < merged_result.numel(); ++i) {
    const double m = merged_result.data<float>()[i], r = runtime_result.data<float>()[i],
                 n = none_out.data<float>()[i];
    difference += (m - r) * (m - r);
    norm += m * m;
    change += (m - n) * (m - n);
  }
  std::printf("merged / none %.3f; runtime / none %.3f\n", with_merged / none, with_runtime / none);
  std::printf(
      "runtime vs merged output: relative difference %.2e (the LoRA changes the output by "
      "%.2e)\n",
      std::sqrt(difference / norm), std::sqrt(change / norm));
  return 0;
} catch (const std::exception& error) {
  std::fprintf(stderr, "wan_lora_cuda_bench: %s\n", error.what());
  return 1;
}
