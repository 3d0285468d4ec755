// Seconds per Wan VAE decode on the GPU (WanVaeDecoder placed there), beside the same decoder on
// the CPU where that is feasible:
//   1. the wan-tiny fixture's shape (examples/models/wan-tiny/vae, latents [1, 16, 2, 4, 6] ->
//      5 frames of 32x48), GPU and CPU;
//   2. a Wan2.1-1.3B-sized decode: the real Wan2.1 VAE config (diffusers' AutoencoderKLWan
//      defaults) with random bf16 weights, latents [1, 16, 21, 60, 104] -> 81 frames of 480x832,
//      in TF32 and FP32 (three-TF32) precision, with the allocator's peak GPU memory; then the CPU
//      decoder on the first --cpu-frames latent frames (default 2: 5 frames), timed and compared
//      with the GPU on the same latents.
//
// --variant N picks the convolution kernel's pipeline (see set_conv3d_variant).
//
//   wan_vae_cuda_bench [--repeats N] [--latent T,H,W] [--cpu-frames K] [--tiny-vae DIR]
//                      [--variant N]
// (run from the repository root, or name the wan-tiny VAE folder with --tiny-vae)
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "core/cuda/conv3d.h"
#include "core/cuda/device_memory.h"
#include "core/error.h"
#include "models/dit/wan/wan_random_checkpoint.h"
#include "models/vae/wan_vae_decoder.h"
#include "models/vae/wan_vae_random_checkpoint.h"

using namespace mmgen;
namespace fs = std::filesystem;

namespace {

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  return values[values.size() / 2];
}

double relative_error(const Tensor& actual, const Tensor& expected) {
  double difference = 0, norm = 0;
  for (int64_t i = 0; i < expected.numel(); ++i) {
    const double d = double(actual.data<float>()[i]) - expected.data<float>()[i];
    difference += d * d;
    norm += double(expected.data<float>()[i]) * expected.data<float>()[i];
  }
  return std::sqrt(difference / norm);
}

// Median seconds of `repeats` GPU decodes (after one untimed warm-up decode).
double time_gpu(const vae::WanVaeDecoder& gpu, const Tensor& z, int repeats,
                std::vector<double>* all = nullptr) {
  gpu.decode(z);
  std::vector<double> times;
  for (int i = 0; i < repeats; ++i) {
    const auto start = std::chrono::steady_clock::now();
    gpu.decode(z);
    times.push_back(seconds_since(start));
  }
  if (all) *all = times;
  return median(times);
}

}  // namespace

int main(int argc, char** argv) try {
  int repeats = 3, cpu_frames = 2;
  fs::path tiny_folder = "examples/models/wan-tiny/vae";
  Shape latent = {1, 16, 21, 60, 104};
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    check(i + 1 < argc, "wan_vae_cuda_bench: {} needs a value", arg);
    const char* value = argv[++i];
    if (arg == "--repeats")
      repeats = std::max(1, std::atoi(value));
    else if (arg == "--cpu-frames")
      cpu_frames = std::max(0, std::atoi(value));
    else if (arg == "--variant")
      cuda::set_conv3d_variant(std::atoi(value));
    else if (arg == "--tiny-vae")
      tiny_folder = value;
    else if (arg == "--latent")
      check(std::sscanf(value, "%ld,%ld,%ld", &latent[2], &latent[3], &latent[4]) == 3,
            "--latent '{}' is not T,H,W", value);
    else
      fail("wan_vae_cuda_bench: unknown option {}", arg);
  }
  auto& allocator = cuda::CachingAllocator::instance();

  {  // 1. the tiny fixture's shape
    const auto tiny = vae::WanVaeDecoder::open_folder(tiny_folder);
    auto gpu = vae::WanVaeDecoder::open_folder(tiny_folder);
    gpu.set_device(Device::CUDA);
    const Tensor z = dit::random_tensor({1, 16, 2, 4, 6}, 0.0f, 1.7f, 3, DType::F32);
    const double gpu_seconds = time_gpu(gpu, z, 10);
    std::vector<double> cpu_times;
    for (int i = 0; i < 5; ++i) {
      const auto start = std::chrono::steady_clock::now();
      tiny.decode(z);
      cpu_times.push_back(seconds_since(start));
    }
    std::printf(
        "wan-tiny VAE, latents [1,16,2,4,6] -> 5 frames 32x48: GPU %.2f ms, CPU %.2f ms "
        "(medians of 10 / 5)\n",
        gpu_seconds * 1e3, median(cpu_times) * 1e3);
  }

  // 2. Wan2.1-1.3B-sized: the real VAE config, random bf16 weights.
  const vae::WanVaeConfig config;
  const fs::path file = fs::temp_directory_path() / "mmgen_wan_vae_bench.safetensors";
  write_safetensors(file, vae::random_decoder_checkpoint(config), {{"format", "pt"}});
  const vae::WanVaeDecoder cpu(config, WeightStore::open_file(file));
  vae::WanVaeDecoder gpu(config, WeightStore::open_file(file));
  gpu.set_device(Device::CUDA);
  std::printf(
      "Wan2.1 VAE decoder (base_dim %ld, dim_mult 1,2,4,4, %ld res blocks), random bf16 "
      "weights; %.1f MiB on the GPU as float32\n",
      config.decoder_dim(), config.num_res_blocks, gpu.resident_weight_bytes() / 1048576.0);
  const Tensor z = dit::random_tensor(latent, 0.0f, 1.0f, 4, DType::F32);
  const int64_t frames = config.output_frames(latent[2]);
  for (const auto precision : {ops::ConvPrecision::TF32, ops::ConvPrecision::FP32}) {
    gpu.set_device(Device::CUDA, precision);
    const int runs = precision == ops::ConvPrecision::TF32 ? repeats : 1;
    std::vector<double> times;
    const double seconds = time_gpu(gpu, z, runs, &times);
    std::string all;
    for (double t : times) all += fmt::format(" {:.3f}", t);
    std::printf(
        "GPU decode %s -> %ld frames %ldx%ld, %s: %.3f s (median of %d:%s), %.1f TFLOP "
        "in convolutions and attention = %.0f TFLOP/s\n",
        shape_string(latent).c_str(), frames, latent[3] * 8, latent[4] * 8,
        precision == ops::ConvPrecision::TF32 ? "TF32" : "FP32 (3xTF32)", seconds, runs,
        all.c_str(), gpu.last_decode_flops() / 1e12, gpu.last_decode_flops() / seconds / 1e12);
  }
  {  // what two of the kernel's choices are worth on the whole decode (one decode each)
    gpu.set_device(Device::CUDA, ops::ConvPrecision::TF32);
    double variants[3] = {0, 0, 0};
    for (int variant = 1; variant <= 2; ++variant) {
      cuda::set_conv3d_variant(variant);
      const auto start = std::chrono::steady_clock::now();
      gpu.decode(z);
      variants[variant] = seconds_since(start);
    }
    cuda::set_conv3d_variant(0);
    std::printf(
        "TF32 decode with 16-deep stages, 256 threads (the first kernel): %.3f s; 32-deep, 256 "
        "threads: %.3f s\n",
        variants[1], variants[2]);
  }
  std::printf(
      "peak GPU memory handed out by the caching allocator: %.2f GiB (weights %.2f GiB), "
      "reserved %.2f GiB\n",
      allocator.peak_bytes_in_use() / 1073741824.0, gpu.resident_weight_bytes() / 1073741824.0,
      allocator.bytes_reserved() / 1073741824.0);

  if (cpu_frames > 0) {
    Shape part = latent;
    part[2] = std::min<int64_t>(cpu_frames, latent[2]);
    const Tensor head = z.slice(2, 0, part[2]).contiguous();
    const Tensor on_gpu = gpu.decode(head);
    const auto start = std::chrono::steady_clock::now();
    const Tensor on_cpu = cpu.decode(head);
    const double cpu_seconds = seconds_since(start);
    const auto gpu_start = std::chrono::steady_clock::now();
    gpu.decode(head);
    const double gpu_seconds = seconds_since(gpu_start);
    std::printf(
        "first %ld latent frames (%ld output frames): CPU %.1f s, GPU (TF32) %.3f s; GPU vs "
        "CPU relative error %.2e\n",
        part[2], config.output_frames(part[2]), cpu_seconds, gpu_seconds,
        relative_error(on_gpu, on_cpu));
  }
  fs::remove(file);
  return 0;
} catch (const std::exception& error) {
  std::fprintf(stderr, "wan_vae_cuda_bench: %s\n", error.what());
  return 1;
}
