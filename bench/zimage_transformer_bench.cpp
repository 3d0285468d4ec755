// Seconds per forward of a Z-Image-Turbo-shaped transformer (dim 3840, 30 heads of 128, SwiGLU
// 10240, cap_feat_dim 2560) with random bf16 weights on the CPU, for a few layers (all 30 would
// only multiply the time by the layer count): thread scaling and per-block cost. The weights are
// written once to a temporary safetensors file and memory-mapped, as a real checkpoint is used.
//
//   OMP_NUM_THREADS=2 zimage_transformer_bench [--layers 2] [--refiners 1] [--size 512]
//       [--caption 128] [--repeats 2] [--dir DIR] [--bf16]
//
// --bf16 runs the products as --cpu-matmul-precision bf16 does.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/gemm_cpu.h"
#include "core/safetensors.h"
#include "models/dit/wan/wan_random_checkpoint.h"
#include "models/dit/zimage/zimage_random_checkpoint.h"
#include "models/dit/zimage/zimage_transformer.h"

namespace {

using namespace mmgen;
namespace fs = std::filesystem;

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

int64_t flag(int argc, char** argv, const char* name, int64_t fallback) {
  for (int i = 1; i + 1 < argc; ++i)
    if (std::strcmp(argv[i], name) == 0) return std::atoll(argv[i + 1]);
  return fallback;
}

int run(int argc, char** argv) {
  dit::ZImageConfig config;  // the class defaults: Z-Image-Turbo's sizes
  config.n_layers = flag(argc, argv, "--layers", 2);
  config.n_refiner_layers = flag(argc, argv, "--refiners", 1);
  const int64_t size = flag(argc, argv, "--size", 512),
                caption = flag(argc, argv, "--caption", 128);
  const int repeats = int(flag(argc, argv, "--repeats", 2));
  check(size % 16 == 0 && size > 0, "--size must be a positive multiple of 16 (VAE x8, patch x2)");
  fs::path dir;
  for (int i = 1; i + 1 < argc; ++i)
    if (std::strcmp(argv[i], "--dir") == 0) dir = argv[i + 1];
  for (int i = 1; i < argc; ++i)
    if (std::strcmp(argv[i], "--bf16") == 0)
      cpu::set_product_precision(cpu::ProductPrecision::BF16);
  const bool own_dir = dir.empty();
  if (own_dir) dir = fs::temp_directory_path() / ("mmgen-zimage-bench-" + std::to_string(getpid()));
  fs::create_directories(dir);
  const fs::path weights = dir / "diffusion_pytorch_model.safetensors";
  if (!fs::exists(weights)) {
    std::fprintf(stderr, "writing random bf16 weights to %s ...\n", weights.c_str());
    write_safetensors(weights, dit::zimage_random_checkpoint(config), {{"format", "pt"}});
  }
  const dit::ZImageTransformer model(config, WeightStore::open_file(weights));

  const int64_t latent = size / 8;
  const Tensor latents = dit::random_tensor({16, 1, latent, latent}, 0.0f, 1.7f, 101, DType::F32);
  const Tensor text = dit::random_tensor({caption, 2560}, 0.0f, 3.0f, 102, DType::F32);
  const int64_t tokens = (latent / 2) * (latent / 2);
  std::printf(
      "Z-Image-Turbo-shaped transformer, %lld main + %lld noise + %lld context refiner layers, "
      "%lldx%lld image (%lld image tokens), %lld caption tokens, OMP_NUM_THREADS=%s\n",
      (long long)config.n_layers, (long long)config.n_refiner_layers,
      (long long)config.n_refiner_layers, (long long)size, (long long)size, (long long)tokens,
      (long long)caption,
      std::getenv("OMP_NUM_THREADS") ? std::getenv("OMP_NUM_THREADS") : "unset");
  std::vector<double> seconds;
  for (int r = 0; r < repeats; ++r) {
    const auto start = std::chrono::steady_clock::now();
    const Tensor out = model.forward({{latents, text, 0.5f}})[0];
    seconds.push_back(seconds_since(start));
    for (int64_t i = 0; i < out.numel(); ++i)
      check(std::isfinite(out.data<float>()[i]), "non-finite output at {}", i);
    std::printf("  forward %d: %.2f s\n", r + 1, seconds.back());
  }
  std::printf("min %.2f s per forward\n", *std::min_element(seconds.begin(), seconds.end()));
  if (own_dir) fs::remove_all(dir);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const mmgen::Error& e) {
    std::fprintf(stderr, "zimage_transformer_bench: %s\n", e.what());
    return 1;
  }
}
