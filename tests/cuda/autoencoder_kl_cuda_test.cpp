// The AutoencoderKL decoder (Z-Image's VAE) placed on the GPU (one class:
// AutoencoderKLDecoder::set_device) in both precisions.
//
// Against diffusers on the zimage-tiny fixture ($MMGEN_FIXTURES or ../shared/fixtures; without it
// the test fails, saying so): FP32 (three-TF32 convolution products, full float32 attention
// products) within the CPU test's 1e-5 relative error (tests/autoencoder_kl_test.cpp); TF32
// within 3e-3, the bound the Wan VAE's TF32 mode is held to: TF32 keeps 10 of float32's 23
// mantissa bits of each product's operands (relative rounding up to 2^-11 ≈ 4.9e-4 per operand),
// and a decode stacks about a dozen convolutions and the attention's two products, so 1e-3 is
// the expected size and 3e-3 leaves room without hiding a wrong computation (an error there is
// of order 1). Then against the same decoder on the CPU: the fixture's decoder on odd latents
// (35 positions: the scalar group-norm path) and a random-weight decoder of 64/128 channels in 32
// groups with post_quant_conv, batch 2 (one attention per image) and 20x28 latents; the CPU is
// itself checked against diffusers, so the same bounds apply, except FP32 on the random decoder:
// 5e-5, the bound the Wan VAE's FP32 mode is held to against its CPU decoder (random weights
// at full gain amplify rounding more than the fixture's; three-TF32 products still drop the
// small·small term, about 2^-22 of each product). Also: denormalize of GPU latents
// equals the CPU's bit for bit, back on the CPU the decoder gives the CPU's bits again, and weights
// leave the GPU; the tiled decode on the GPU (check_tiled). MMGEN_KL_BENCH=HxW adds a timing (see
// benchmark_when_asked).
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "core/cuda/device_memory.h"
#include "cuda_test_support.h"
#include "models/dit/wan/wan_random_checkpoint.h"
#include "models/vae/autoencoder_kl_decoder.h"
#include "models/vae/autoencoder_kl_tiled_decode.h"

using namespace mmgen;
using namespace mmgen::cuda_testing;
namespace fs = std::filesystem;

namespace {

struct Difference {
  double relative = INFINITY, max_abs = INFINITY;
};

Difference compare(const Tensor& actual, const Tensor& expected) {
  Difference d;
  if (actual.shape() != expected.shape() || !actual.is_cpu()) return d;
  const Tensor a = actual.to(DType::F32).contiguous(), e = expected.to(DType::F32).contiguous();
  double difference = 0, norm = 0, max_abs = 0;
  for (int64_t i = 0; i < e.numel(); ++i) {
    const double x = a.data<float>()[i], y = e.data<float>()[i];
    if (!std::isfinite(x)) return d;
    difference += (x - y) * (x - y);
    norm += y * y;
    max_abs = std::max(max_abs, std::abs(x - y));
  }
  d.relative = std::sqrt(difference / norm);
  d.max_abs = max_abs;
  return d;
}

bool identical(const Tensor& a, const Tensor& b) {
  return a.shape() == b.shape() && std::memcmp(a.raw(), b.raw(), a.nbytes()) == 0;
}

// Decodes `latents` on the GPU in `precision` and compares with `expected` (host).
void check_decode(vae::AutoencoderKLDecoder& decoder, ops::ConvPrecision precision,
                  const Tensor& latents, const Tensor& expected, double bound,
                  const std::string& what) {
  decoder.set_device(Device::CUDA, precision);
  expect(decoder.device() == Device::CUDA && decoder.resident_weight_bytes() > 0,
         what + ": set_device(CUDA) uploads the weights");
  const Tensor decoded = decoder.decode(latents.to(Device::CUDA));
  expect(decoded.is_cpu(), what + ": the image comes back to the host");
  const Difference d = compare(decoded, expected);
  expect(d.relative < bound,
         fmt::format("{}, {} {} -> {}: relative error {:.2e} < {:.0e} (max abs {:.2e})", what,
                     precision == ops::ConvPrecision::FP32 ? "FP32" : "TF32",
                     shape_string(latents.shape()), shape_string(decoded.shape()), d.relative,
                     bound, d.max_abs));
}

// Both precisions on the GPU against the same decoder on the CPU.
void check_against_cpu(vae::AutoencoderKLDecoder& decoder, const Tensor& latents,
                       const std::string& name, double fp32_bound) {
  decoder.set_device(Device::CPU);
  const Tensor expected = decoder.decode(latents);
  check_decode(decoder, ops::ConvPrecision::FP32, latents, expected, fp32_bound,
               name + " vs the CPU");
  check_decode(decoder, ops::ConvPrecision::TF32, latents, expected, 3e-3, name + " vs the CPU");
  decoder.set_device(Device::CPU);
  expect(decoder.resident_weight_bytes() == 0 && identical(decoder.decode(latents), expected),
         name + ": back on the CPU the weights leave the GPU and the decode is the CPU's again");
}

// The tiled decode (models/vae/autoencoder_kl_tiled_decode.h) with the decoder on the GPU: one
// tile covering the plane gives the untiled GPU decode bit for bit (the same kernels on the same
// head), and several tiles give the CPU's tiled decode within the untiled bounds (each tile's
// GroupNorm statistics are its region's on both devices, so the two compute the same thing).
void check_tiled(vae::AutoencoderKLDecoder& decoder, const Tensor& latents,
                 const vae::TileLayout& several, const std::string& name, double fp32_bound) {
  decoder.set_device(Device::CPU);
  const Tensor cpu_tiled = vae::decode_tiled(decoder, latents, several);
  const vae::TileLayout whole{std::max(latents.size(2), latents.size(3)), 0};
  for (ops::ConvPrecision precision : {ops::ConvPrecision::FP32, ops::ConvPrecision::TF32}) {
    const char* mode = precision == ops::ConvPrecision::FP32 ? "FP32" : "TF32";
    decoder.set_device(Device::CUDA, precision);
    expect(identical(vae::decode_tiled(decoder, latents.to(Device::CUDA), whole),
                     decoder.decode(latents.to(Device::CUDA))),
           fmt::format("{}, {}: one tile on the GPU is the untiled GPU decode, bit for bit", name,
                       mode));
    const Difference d =
        compare(vae::decode_tiled(decoder, latents.to(Device::CUDA), several), cpu_tiled);
    const double bound = precision == ops::ConvPrecision::FP32 ? fp32_bound : 3e-3;
    expect(d.relative < bound,
           fmt::format("{}, {}: {}-pixel tiles on the GPU vs the CPU's: relative error {:.2e} < "
                       "{:.0e} (max abs {:.2e})",
                       name, mode, several.tile, d.relative, bound, d.max_abs));
  }
  decoder.set_device(Device::CPU);
}

// Every tensor of a decoder with `config`'s structure, random float32 (convolution and linear
// weights scaled by 1/√fan_in so activations stay in range, norm weights near 1).
NamedTensors random_checkpoint(const vae::AutoencoderKLConfig& config) {
  NamedTensors tensors;
  uint64_t seed = 1000;
  auto add = [&](const std::string& name, const Shape& shape, float center, float spread) {
    tensors.emplace_back(name, dit::random_tensor(shape, center, spread, ++seed, DType::F32));
  };
  auto conv = [&](const std::string& prefix, int64_t in, int64_t out, int64_t kernel) {
    add(prefix + ".weight", {out, in, kernel, kernel}, 0.0f,
        float(std::sqrt(3.0 / double(in * kernel * kernel))));
    add(prefix + ".bias", {out}, 0.0f, 0.05f);
  };
  auto norm = [&](const std::string& prefix, int64_t channels) {
    add(prefix + ".weight", {channels}, 1.0f, 0.2f);
    add(prefix + ".bias", {channels}, 0.0f, 0.1f);
  };
  auto resnet = [&](const std::string& prefix, int64_t in, int64_t out) {
    norm(prefix + ".norm1", in);
    conv(prefix + ".conv1", in, out, 3);
    norm(prefix + ".norm2", out);
    conv(prefix + ".conv2", out, out, 3);
    if (in != out) conv(prefix + ".conv_shortcut", in, out, 1);
  };
  const std::vector<int64_t>& channels = config.block_out_channels;
  const int64_t latent = config.latent_channels, deepest = channels.back();
  if (config.use_post_quant_conv) conv("post_quant_conv", latent, latent, 1);
  conv("decoder.conv_in", latent, deepest, 3);
  resnet("decoder.mid_block.resnets.0", deepest, deepest);
  resnet("decoder.mid_block.resnets.1", deepest, deepest);
  const std::string attention = "decoder.mid_block.attentions.0";
  norm(attention + ".group_norm", deepest);
  for (const char* projection : {".to_q", ".to_k", ".to_v", ".to_out.0"}) {
    add(attention + projection + ".weight", {deepest, deepest}, 0.0f,
        float(std::sqrt(3.0 / double(deepest))));
    add(attention + projection + ".bias", {deepest}, 0.0f, 0.05f);
  }
  int64_t previous = deepest;
  for (size_t i = 0; i < channels.size(); ++i) {
    const int64_t out = channels[channels.size() - 1 - i];
    const std::string prefix = fmt::format("decoder.up_blocks.{}", i);
    for (int64_t j = 0; j <= config.layers_per_block; ++j)
      resnet(fmt::format("{}.resnets.{}", prefix, j), j == 0 ? previous : out, out);
    if (i + 1 < channels.size()) conv(prefix + ".upsamplers.0.conv", out, out, 3);
    previous = out;
  }
  norm("decoder.conv_norm_out", channels.front());
  conv("decoder.conv_out", channels.front(), config.out_channels, 3);
  return tensors;
}

// Timing only: MMGEN_KL_BENCH=HxW (output pixels, multiples of 8) decodes random latents with a
// random decoder of Z-Image's VAE structure (128/256/512/512 channels, 3 resnets per up block) in
// both precisions, after one warm-up decode each, and prints the seconds.
void benchmark_when_asked() {
  const char* size = std::getenv("MMGEN_KL_BENCH");
  int height = 0, width = 0;
  if (!size || std::sscanf(size, "%dx%d", &height, &width) != 2 || height <= 0 || width <= 0)
    return;
  vae::AutoencoderKLConfig config;
  config.block_out_channels = {128, 256, 512, 512};
  config.layers_per_block = 2;
  config.latent_channels = 16;
  config.norm_num_groups = 32;
  config.use_post_quant_conv = false;
  const fs::path file = fs::temp_directory_path() / "mmgen_autoencoder_kl_bench.safetensors";
  write_safetensors(file, random_checkpoint(config), {{"format", "pt"}});
  vae::AutoencoderKLDecoder decoder(config, WeightStore::open_file(file));
  const Tensor latents =
      dit::random_tensor({1, 16, height / 8, width / 8}, 0.0f, 1.5f, 9, DType::F32)
          .to(Device::CUDA);
  for (ops::ConvPrecision precision : {ops::ConvPrecision::TF32, ops::ConvPrecision::FP32}) {
    decoder.set_device(Device::CUDA, precision);
    decoder.decode(latents);  // warm-up: cuBLASLt plans, the allocator's cache
    const auto start = std::chrono::steady_clock::now();
    decoder.decode(latents);  // returns on the host, so the GPU has finished
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::printf("Z-Image-sized AutoencoderKL decode %dx%d, %s: %.3f s\n", height, width,
                precision == ops::ConvPrecision::FP32 ? "FP32" : "TF32", seconds);
  }
  fs::remove(file);
}

}  // namespace

int main() try {
  const char* from_environment = std::getenv("MMGEN_FIXTURES");
  const fs::path fixtures =
      from_environment ? fs::path(from_environment) : fs::path(MMGEN_SHARED_DIR) / "fixtures";
  const fs::path folder = fixtures / "zimage-tiny";
  if (!fs::exists(folder / "reference/reference.safetensors")) {
    expect(false, "no fixture at " + folder.string() + " (set MMGEN_FIXTURES)");
  } else {
    vae::AutoencoderKLDecoder tiny = vae::AutoencoderKLDecoder::open_folder(folder / "model/vae");
    const WeightStore reference =
        WeightStore::open_file(folder / "reference/reference.safetensors");
    const Tensor latents = reference.get_f32("vae.latents"),
                 decoded = reference.get_f32("vae.decoded");
    check_decode(tiny, ops::ConvPrecision::FP32, latents, decoded, 1e-5,
                 "zimage-tiny fixture vs diffusers");
    check_decode(tiny, ops::ConvPrecision::TF32, latents, decoded, 3e-3,
                 "zimage-tiny fixture vs diffusers");

    const Tensor final_latents = reference.get_f32("pipeline.latents_after_step3");
    expect(identical(tiny.denormalize(final_latents.to(Device::CUDA)),
                     tiny.denormalize(final_latents)),
           "denormalize of latents on the GPU equals the CPU's, bit for bit");

    check_against_cpu(tiny, dit::random_tensor({1, 16, 5, 7}, 0.0f, 1.5f, 5, DType::F32),
                      "zimage-tiny on 5x7 latents", 1e-5);
    tiny.set_device(Device::CUDA);
    const std::string message = error_message([&] { tiny.decode(Tensor::zeros({1, 4, 2, 3})); });
    expect(message.find("expected latents [batch, 16, height, width]") != std::string::npos,
           "wrong latent channels give one clear error: " + message);
  }

  vae::AutoencoderKLConfig config;  // 64/128 channels in 32 groups, post_quant_conv, 2 resnets
  config.block_out_channels = {64, 128};
  config.layers_per_block = 1;
  config.latent_channels = 16;
  config.norm_num_groups = 32;
  const fs::path file = fs::temp_directory_path() / "mmgen_autoencoder_kl_cuda_test.safetensors";
  write_safetensors(file, random_checkpoint(config), {{"format", "pt"}});
  vae::AutoencoderKLDecoder wide(config, WeightStore::open_file(file));
  check_against_cpu(wide, dit::random_tensor({2, 16, 20, 28}, 0.0f, 1.5f, 6, DType::F32),
                    "random 64/128-channel decoder", 5e-5);
  check_tiled(wide, dit::random_tensor({2, 16, 20, 28}, 0.0f, 1.5f, 6, DType::F32),
              vae::TileLayout{8, 2}, "random 64/128-channel decoder, tiled", 5e-5);

  benchmark_when_asked();
  std::printf("peak GPU memory handed out: %.1f MiB\n",
              cuda::CachingAllocator::instance().peak_bytes_in_use() / 1048576.0);
  return finish("autoencoder_kl_cuda_test");
} catch (const std::exception& error) {
  std::printf("autoencoder_kl_cuda_test: error: %s\n", error.what());
  return 1;
}
