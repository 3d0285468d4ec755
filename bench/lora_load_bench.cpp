// What loading a LoRA costs beyond reading the model: a random rank-R LoRA (default 64) on every
// linear layer of a Wan2.1-1.3B-sized transformer's 30 blocks (300 layers, bf16, diffusers'
// names: about 175 MB at rank 64), then, each the median of --repeats runs: reading the file
// (read_lora_file: every tensor to float32), its SHA-256 (the output's metadata), the merge into
// the bf16 weights (W + up · down in float32, stored back as bf16) and the runtime updates'
// preparation (the LoRA's matrices stacked and scaled, the weights untouched). Host only.
//   lora_load_bench [--rank R] [--repeats N]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "core/file.h"
#include "core/safetensors.h"
#include "models/dit/wan/wan_random_checkpoint.h"
#include "models/dit/wan/wan_transformer.h"
#include "models/lora/lora_file.h"
#include "models/lora/lora_merge.h"

using namespace mmgen;
namespace fs = std::filesystem;

int main(int argc, char** argv) try {
  int64_t rank = 64;
  int repeats = 3;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--rank")
      rank = std::stoll(argv[i + 1]);
    else if (flag == "--repeats")
      repeats = std::stoi(argv[i + 1]);
    else
      throw std::runtime_error("unknown flag " + flag + "; use --rank R and --repeats N");
  }
  const dit::WanTransformerConfig config = dit::wan21_1_3b_config();
  const fs::path model = fs::temp_directory_path() / "mmgen_wan_1_3b_random.safetensors";
  if (!fs::exists(model))
    write_safetensors(model, dit::random_checkpoint(config), {{"format", "pt"}});
  const fs::path lora_path =
      fs::temp_directory_path() / ("mmgen_wan_1_3b_lora_r" + std::to_string(rank) + ".safetensors");
  write_safetensors(lora_path, dit::random_lora(config, rank), {{"format", "pt"}});
  const WeightStore base = WeightStore::open_file(model);
  const dit::WanTransformer plain(config, base);
  const models::ParameterList tree = [&](const models::ParameterVisitor& visit) {
    plain.list_parameters(visit);
  };
  const auto median = [&](const std::function<void()>& work) {
    std::vector<double> seconds;
    for (int i = 0; i < repeats; ++i) {
      const auto start = std::chrono::steady_clock::now();
      work();
      seconds.push_back(
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    }
    std::sort(seconds.begin(), seconds.end());
    return seconds[seconds.size() / 2];
  };
  lora::LoraFile file;
  const double read = median([&] {
    file = lora::read_lora_file(lora_path, "transformer", dit::WanTransformer::lora_targets);
  });
  std::string hash;
  const double hashing = median([&] { hash = file_sha256(lora_path); });
  const double merge = median([&] {
    const WeightStore merged = lora::merge_loras(base, tree, {{&file, 1.0}}, "Wan");
    (void)merged;
  });
  const double runtime = median([&] {
    const WeightStore updates = lora::with_runtime_loras(base, tree, {{&file, 1.0}}, "Wan");
    (void)updates;
  });
  std::printf(
      "LoRA rank %lld on the 300 linear layers of a Wan2.1-1.3B-sized transformer: %.1f MB "
      "(bf16), %zu layers; %u threads; median of %d\n",
      static_cast<long long>(rank), fs::file_size(lora_path) / 1e6, file.layers.size(),
      std::max(1u, std::thread::hardware_concurrency()), repeats);
  std::printf(
      "read %.3f s; SHA-256 %.3f s; merged into the weights %.3f s; runtime updates made "
      "%.3f s\n",
      read, hashing, merge, runtime);
  std::printf("the LoRA file stays at %s (bench/lora_load_diffusers.py loads the same)\n",
              lora_path.c_str());
  return 0;
} catch (const std::exception& error) {
  std::fprintf(stderr, "lora_load_bench: %s\n", error.what());
  return 1;
}
